package toolkit

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// Tests against the real containerd binary run in a private mount namespace where a temp dir
// is bind-mounted over /etc/containerd (and one over /var/lib/gpupolicy for the status file,
// one over /run/containerd for a test daemon's socket), so `containerd --config
// /etc/containerd/config.toml config dump` reads only test files and a daemon started there
// serves the default socket path as on a node.
const childEnv = "GPUPOLICY_TOOLKIT_NS_CHILD"

func inChild() bool { return os.Getenv(childEnv) == "1" }

// runInNamespace re-runs the calling test inside the namespace; it returns true when the
// caller is already the child and must do the work.
func runInNamespace(t *testing.T) bool { return runInNamespaces(t) }

// runInNamespaces is runInNamespace with extra unshare flags (e.g. a PID namespace).
func runInNamespaces(t *testing.T, unshareFlags ...string) bool {
	t.Helper()
	if inChild() {
		return true
	}
	if _, err := exec.LookPath("containerd"); err != nil {
		t.Skip("containerd is not installed (apt-get install -y containerd): skipping the real-containerd test")
	}
	// Each host directory the child writes gets a temp dir of its own over it: the node's
	// containerd config, the agent's state, containerd's socket, the runtimes' install dirs.
	mounts := []string{"/etc/containerd", filepath.Dir(config.ToolkitStatusFile), filepath.Dir(DefaultContainerdSocket), filepath.Dir(renderedRuntime), "/opt/nvidia"}
	script := `set -e; while [ "$1" != -- ]; do mount --bind "$1" "$2"; shift 2; done; shift; exec "$@"`
	args := append(append([]string{"-m", "--propagation", "private"}, unshareFlags...), "sh", "-c", script, "sh")
	for _, d := range mounts {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("mount point %s: %v", d, err)
		}
		args = append(args, t.TempDir(), d)
	}
	cmd := exec.Command("unshare", append(args, "--",
		os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.v", "-test.count=1")...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("namespace child:\n%s", out)
	if err != nil {
		t.Fatalf("child in private mount namespace failed: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("child did not pass %s", t.Name())
	}
	return false
}

// dumpNode returns containerd's effective configuration of /etc/containerd/config.toml.
func dumpNode(t *testing.T) table {
	t.Helper()
	out, err := Host{Root: "/"}.dump(context.Background(), "/usr/bin/containerd", DefaultConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := parseTOML("dump", out)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// dig walks a table by keys; nil when a key is missing.
func dig(t table, keys ...string) any {
	var cur any = t
	for _, k := range keys {
		m, ok := cur.(table)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func testdata(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}
