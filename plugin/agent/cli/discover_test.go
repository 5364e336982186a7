package cli

import (
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/plugin/agent/discover/discovertest"
)

// Without a node, discover is a dry run on a host: the GPUs it would act on, as JSON.
func TestDiscoverDryRun(t *testing.T) {
	fs := discovertest.New(t)
	fs.Add("0000:3b:00.0", "0x10de", "0x030200")
	t.Setenv("NODE_NAME", "")
	code, out, errOut := run("discover", "--host-root", fs.Root)
	if code != 0 || strings.TrimSpace(out) != `[{"address":"0000:3b:00.0","class":"0x030200"}]` {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// No sysfs under --host-root: exit 1 naming the mount to fix.
	code, _, errOut = run("discover", "--host-root", t.TempDir())
	if code != 1 || !strings.Contains(errOut, "mount the host's /sys") {
		t.Fatalf("without sysfs: exit %d, stderr %q", code, errOut)
	}
}
