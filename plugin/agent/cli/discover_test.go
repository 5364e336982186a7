package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Without a node, discover is a dry run on a host: the GPUs it would act on, as JSON.
func TestDiscoverDryRun(t *testing.T) {
	root := t.TempDir()
	devices := filepath.Join(root, "sys/bus/pci/devices")
	gpu := filepath.Join(root, "sys/devices/pci0000:00/0000:3b:00.0")
	for _, d := range []string{devices, gpu} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, v := range map[string]string{"vendor": "0x10de\n", "class": "0x030200\n"} {
		if err := os.WriteFile(filepath.Join(gpu, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../../../devices/pci0000:00/0000:3b:00.0", filepath.Join(devices, "0000:3b:00.0")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NODE_NAME", "")
	code, out, errOut := run("discover", "--host-root", root)
	if code != 0 || strings.TrimSpace(out) != `[{"address":"0000:3b:00.0","class":"0x030200"}]` {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// No sysfs under --host-root: exit 1 naming the mount to fix.
	code, _, errOut = run("discover", "--host-root", t.TempDir())
	if code != 1 || !strings.Contains(errOut, "mount the host's /sys") {
		t.Fatalf("without sysfs: exit %d, stderr %q", code, errOut)
	}
}
