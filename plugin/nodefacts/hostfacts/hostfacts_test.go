package hostfacts

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// hostWithDriver writes a /proc/driver/nvidia/version under a fake host root.
func hostWithDriver(t *testing.T, line string) string {
	t.Helper()
	root := t.TempDir()
	p := filepath.Join(root, KernelDriverFile)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(line+"\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestReadKernelDriver(t *testing.T) {
	for line, want := range map[string]string{
		"NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 30 00:00:00 UTC 2025":                          "580.95.05",
		"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.172.08  Release Build  (dvs-builder@U16-I3-B03-4-3)": "570.172.08",
		"NVRM version: NVIDIA UNIX aarch64 Kernel Module  550.54  Thu Feb 22 01:44:30 UTC 2024":                            "550.54",
	} {
		got, err := ReadKernelDriver(hostWithDriver(t, line))
		if err != nil || got != want {
			t.Errorf("%q: %q %v, want %q", line, got, err, want)
		}
	}
	if _, err := ReadKernelDriver(t.TempDir()); err != ErrNoDriver {
		t.Errorf("missing file: %v", err)
	}
	if _, err := ReadKernelDriver(hostWithDriver(t, "garbage")); err == nil || !strings.Contains(err.Error(), "no driver version") {
		t.Errorf("garbage: %v", err)
	}
}

// The version file is read inside the host root: a link there (here /proc/driver/nvidia, as a
// driver container may leave it) leads to the host's file, never to this container's.
func TestReadKernelDriverThroughLink(t *testing.T) {
	root := hostWithDriver(t, "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 30 00:00:00 UTC 2025")
	nvidia := filepath.Join(root, filepath.Dir(KernelDriverFile))
	if err := os.MkdirAll(filepath.Join(root, "/run"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(nvidia, filepath.Join(root, "/run/nvidia-proc")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/run/nvidia-proc", nvidia); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadKernelDriver(root); err != nil || got != "580.95.05" {
		t.Fatalf("through an absolute link: %q %v", got, err)
	}
	if err := os.RemoveAll(filepath.Join(root, "/run/nvidia-proc")); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadKernelDriver(root); err == nil || !strings.Contains(err.Error(), "symbolic link /proc/driver/nvidia -> /run/nvidia-proc points to nothing") {
		t.Fatalf("dangling link: %v", err)
	}
}

// The toolkit record round-trips through its file, an absent file is ErrNoToolkitStatus and a
// corrupt one names the file and the fix; Read carries each fact's error, not the first.
func TestRead(t *testing.T) {
	root := t.TempDir()
	h := Read(root)
	if !errors.Is(h.KernelDriverErr, ErrNoDriver) || !errors.Is(h.ToolkitErr, ErrNoToolkitStatus) {
		t.Fatalf("empty host: %+v", h)
	}
	p := filepath.Join(root, config.ToolkitStatusFile)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(`{"verified":true,"handlers":["nvidia"],"dropInSHA256":"ab","containerdVersion":"2.1.9","time":"2026-12-06T07:00:00Z"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	h = Read(root)
	want := config.ToolkitStatus{Verified: true, Handlers: []string{"nvidia"}, DropInSHA256: "ab", ContainerdVersion: "2.1.9", Time: time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)}
	if h.ToolkitErr != nil || h.Toolkit.DropInSHA256 != want.DropInSHA256 || !h.Toolkit.Time.Equal(want.Time) || !h.Toolkit.Verified || h.Toolkit.Handlers[0] != "nvidia" {
		t.Fatalf("toolkit: %+v %v", h.Toolkit, h.ToolkitErr)
	}
	if !errors.Is(h.KernelDriverErr, ErrNoDriver) {
		t.Fatalf("the driver's error must stay its own: %v", h.KernelDriverErr)
	}
	if err := os.WriteFile(p, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadToolkitStatus(root); err == nil || !strings.Contains(err.Error(), config.ToolkitStatusFile) || !strings.Contains(err.Error(), "remove it") {
		t.Fatalf("corrupt record: %v", err)
	}
}

// TestReadKernelModuleType: the flavour comes from the version line the module writes.
func TestReadKernelModuleType(t *testing.T) {
	for line, want := range map[string]KernelModule{
		"NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 30 00:00:00 UTC 2025":                            {"580.95.05", "proprietary"},
		"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.172.08  Release Build  (dvs-builder@U16-I3-B03-4-3)":   {"570.172.08", "open"},
		"NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  Release Build  (dvs-builder@U22-I3-AE18-23-3)": {"580.95.05", "open"},
	} {
		got, err := ReadKernelModule(hostWithDriver(t, line))
		if err != nil || got != want {
			t.Errorf("%q: %+v %v, want %+v", line, got, err, want)
		}
		if f := Read(hostWithDriver(t, line)); f.KernelModules != want.Type || f.KernelDriver != want.Version {
			t.Errorf("Read %q: %q %q", line, f.KernelDriver, f.KernelModules)
		}
	}
}
