package standin

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpupolicy/gpupolicy/e2e/internal/standin/layout"
)

// containerd is a real containerd daemon with its own root, state and socket, so a test
// imports and runs images without touching the host's containerd.
type containerd struct {
	dir, sock string
	ctrBin    string
}

// daemons are the containerd releases a real node runs: Debian's 1.6 (on PATH) and 2.x as
// e2e/hack/build-containerd.sh builds it (make containerd2). bin is the directory of
// containerd, its shim and ctr; "" takes them from PATH.
func daemons(t *testing.T) map[string]string {
	t.Helper()
	cache := os.Getenv("GPUPOLICY_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "gpupolicy")
	}
	version := os.Getenv("CONTAINERD2_VERSION")
	if version == "" {
		version = "v2.1.9"
	}
	v2 := filepath.Join(cache, "node-bin", "containerd-"+version)
	return map[string]string{"containerd-1.6": "", "containerd-" + version: v2}
}

// forEachContainerd runs f once for each release in daemons; f starts its daemon with start
// (an environment of its own each time). A 2.x not built yet is skipped (a failure with CI=1).
func forEachContainerd(t *testing.T, f func(t *testing.T, start func(env ...string) *containerd)) {
	for name, bin := range daemons(t) {
		t.Run(name, func(t *testing.T) {
			if bin != "" {
				if _, err := os.Stat(filepath.Join(bin, "containerd")); err != nil {
					if os.Getenv("CI") == "1" {
						t.Fatalf("CI=1 but %s is not built: make containerd2", bin)
					}
					t.Skipf("%s is not built (make containerd2)", bin)
				}
			}
			f(t, func(env ...string) *containerd { return startContainerd(t, bin, env...) })
		})
	}
}

// needNode skips a test that needs root and containerd 1.6, ctr and runc, unless CI=1 says
// the machine must have them.
func needNode(t *testing.T) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	for _, bin := range []string{"containerd", "ctr", "containerd-shim-runc-v2", layout.HostRunc} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	if len(missing) == 0 {
		return
	}
	if os.Getenv("CI") == "1" {
		t.Fatalf("CI=1 but this machine lacks %s (make host-deps installs containerd and runc)", strings.Join(missing, ", "))
	}
	t.Skipf("needs %s (set CI=1 to make this a failure)", strings.Join(missing, ", "))
}

// startContainerd starts a daemon from bin ("" for PATH) and stops it (and its containers) at
// cleanup. The CRI plugins are off: ctr talks to containerd's own API. A short directory
// under /tmp keeps the socket path under the 108 bytes a unix socket address allows.
func startContainerd(t *testing.T, bin string, env ...string) *containerd {
	t.Helper()
	dir, err := os.MkdirTemp("", "standin-ctrd-")
	if err != nil {
		t.Fatal(err)
	}
	c := &containerd{dir: dir, sock: filepath.Join(dir, "c.sock"), ctrBin: filepath.Join(bin, "ctr")}
	daemon := filepath.Join(bin, "containerd")
	if bin == "" {
		c.ctrBin, daemon = "ctr", "containerd"
	}
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[debug]
  address = ""
[metrics]
  address = ""
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.sock, c.sock+".ttrpc")
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(daemon, "--config", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	// containerd finds its shim on PATH: the one of its own release.
	cmd.Env = append(os.Environ(), env...)
	if bin != "" {
		cmd.Env = append(cmd.Env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Containers first (ctr run --rm leaves none unless a test failed half-way), then the
		// daemon; its shims exit with their tasks.
		out, _ := exec.Command(c.ctrBin, "-a", c.sock, "-n", "k8s.io", "task", "ls", "-q").Output()
		for _, id := range strings.Fields(string(out)) {
			_ = exec.Command(c.ctrBin, "-a", c.sock, "-n", "k8s.io", "task", "kill", "-s", "SIGKILL", id).Run()
			_ = exec.Command(c.ctrBin, "-a", c.sock, "-n", "k8s.io", "task", "delete", "-f", id).Run()
		}
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			log, _ := os.ReadFile(logf.Name())
			t.Logf("containerd log (%s):\n%s", dir, tail(string(log), 40))
			return
		}
		// Snapshots are overlay mounts only while containers run; none are left now.
		os.RemoveAll(dir)
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if conn, err := net.Dial("unix", c.sock); err == nil {
			conn.Close()
			break
		}
		if cmd.ProcessState != nil || time.Now().After(deadline) {
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("containerd did not serve %s:\n%s", c.sock, tail(string(log), 40))
		}
	}
	return c
}

// ctr runs ctr against the daemon in the k8s.io namespace (the kubelet's) and returns its
// stdout; a failure fails the test with ctr's stderr.
func (c *containerd) ctr(t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.ctrErr(args...)
	if err != nil {
		t.Fatalf("ctr %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func (c *containerd) ctrErr(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.ctrBin, append([]string{"-a", c.sock, "-n", "k8s.io"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s%s", err, stderr.String(), stdout.String())
	}
	return stdout.String(), nil
}

// importImage imports a docker-archive and fails the test unless ctr lists ref afterwards.
func (c *containerd) importImage(t *testing.T, tarball, ref string) {
	t.Helper()
	c.ctr(t, "image", "import", tarball)
	if ls := c.ctr(t, "image", "ls", "-q"); !strings.Contains("\n"+ls, "\n"+ref+"\n") {
		t.Fatalf("after importing %s, ctr image ls does not list %s:\n%s", tarball, ref, ls)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
