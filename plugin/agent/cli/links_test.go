package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A main config behind a link loop: toolkit install exits 1 naming the path and the link, and
// writes nothing; --help says how links are handled.
func TestToolkitInstallLinkLoop(t *testing.T) {
	root, dropIn, proc := toolkitHost(t)
	cfg := filepath.Join(root, "/etc/containerd/config.toml")
	if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/containerd/config.toml", cfg); err != nil {
		t.Fatal(err)
	}
	code, out, errs := run("toolkit", "install", "--host-root", root, "--drop-in", dropIn, "--containerd-version", "2.1",
		"--restart-mode", "none", "--containerd-bin", "none", "--proc", proc)
	if code != 1 || out != "" || !strings.Contains(errs, "host path /etc/containerd/config.toml under --host-root "+root+": more than 40 symbolic links (a loop; the last one followed is /etc/containerd/config.toml -> /etc/containerd/config.toml)") {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
	if entries, _ := os.ReadDir(filepath.Dir(cfg)); len(entries) != 1 {
		t.Fatalf("written on the node: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(root, "/var/lib/gpupolicy")); !os.IsNotExist(err) {
		t.Fatalf("status directory created: %v", err)
	}
	if _, help, _ := run("--help"); !strings.Contains(help, "resolved inside it as the host's kernel would after chroot") || !strings.Contains(help, "cp --remove-destination TARGET LINK") {
		t.Fatal("--help does not say how host paths and links are handled")
	}
}
