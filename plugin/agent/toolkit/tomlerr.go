package toolkit

import (
	"errors"
	"fmt"

	"github.com/pelletier/go-toml/v2"
)

// tomlError says where a TOML document failed to parse: name (a host path, "--drop-in FILE",
// "containerd config dump") with go-toml's line and column, so a person can open the file at
// the line instead of searching a node's config for the mistake.
func tomlError(name string, err error) error {
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, col := de.Position()
		return fmt.Errorf("%s: line %d, column %d: not valid TOML: %w", name, row, col, err)
	}
	return fmt.Errorf("%s is not valid TOML: %w", name, err)
}
