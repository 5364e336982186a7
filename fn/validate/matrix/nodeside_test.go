package matrix

import (
	"strconv"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// The node agent cannot read this table (it ships without the function), so it carries the
// containerd → config version rule as code in plugin/config. This keeps the two in step: a
// matrix entry that disagrees with the code the agent and the renderer run fails here.
func TestContainerdConfigVersionMatchesNodeSide(t *testing.T) {
	for _, c := range Default().Containerd {
		major, _, _ := strings.Cut(c.Minor, ".")
		m, err := strconv.Atoi(major)
		if err != nil {
			t.Fatalf("containerd minor %q: %v", c.Minor, err)
		}
		if got := config.ContainerdConfigVersion(m); got != c.ConfigVersion {
			t.Errorf("containerd %s: matrix.yaml says config version %d, plugin/config.ContainerdConfigVersion says %d", c.Minor, c.ConfigVersion, got)
		}
	}
}
