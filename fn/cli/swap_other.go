//go:build !linux

package cli

import (
	"errors"
	"io/fs"
	"os"
)

// swapDir puts tmp at dir with two renames (no atomic exchange here): between them dir is
// briefly absent, never half written.
func swapDir(tmp, dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return os.Rename(tmp, dir)
	}
	return swapByRename(tmp, dir)
}
