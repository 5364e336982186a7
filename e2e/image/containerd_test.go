package image

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// containerd is a private containerd daemon: its own root, state and sockets in a temp dir,
// so it touches neither the host's containerd nor another test's.
type containerd struct {
	sock     string
	log      string
	runcRoot string
	cmd      *exec.Cmd
}

// startContainerd starts Debian's containerd (1.6) with a version 2 config. The CRI section
// sets restrict_oom_score_adj: this VM lacks CAP_SYS_RESOURCE (DESIGN.md, "A real node runs").
func startContainerd(t *testing.T, bin string) *containerd {
	t.Helper()
	dir, err := os.MkdirTemp("", "gpupolicy-image-")
	if err != nil {
		t.Fatal(err)
	}
	c := &containerd{sock: filepath.Join(dir, "containerd.sock"), log: filepath.Join(dir, "containerd.log"), runcRoot: filepath.Join(dir, "runc")}
	config := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q
[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[6]q
    conf_dir = %[6]q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.sock, c.sock+".ttrpc",
		filepath.Join(dir, "opt"), filepath.Join(dir, "cni"))
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(c.log)
	if err != nil {
		t.Fatal(err)
	}
	c.cmd = exec.Command(bin, "--config", cfg)
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.cmd.Wait(); logf.Close() }()
	t.Cleanup(func() {
		c.removeContainers()
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = c.cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("containerd log kept: %s\n%s", c.log, tail(c.log, 30))
			return
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("remove %s: %v", dir, err)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, _, err := c.ctr(context.Background(), nil, "version"); err == nil {
			return c
		}
		select {
		case err := <-exited:
			t.Fatalf("containerd exited at start: %v\n%s", err, tail(c.log, 30))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd did not answer on %s within 30s\n%s", c.sock, tail(c.log, 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ctr runs ctr against this daemon in the kubelet's namespace (k8s.io), with stdin if given.
func (c *containerd) ctr(ctx context.Context, stdin []byte, args ...string) (stdout, stderr []byte, err error) {
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", c.sock, "--namespace", "k8s.io"}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	if err != nil {
		err = fmt.Errorf("ctr %s: %w\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.Bytes(), errb.Bytes(), err
}

// run runs the image once (ctr run --rm) as its own container; args replace its entrypoint
// when given, resolved through the image's PATH as the kubelet's command would be.
//
// ctr forwards the end of stdin to the task only once the task exists (it sets its stdin
// closer after NewTask returns); an EOF read earlier is lost and the function waits forever.
// So stdin stays open until the task runs: it cannot exit before its input ended.
func (c *containerd) run(t *testing.T, image, id string, stdin []byte, args ...string) (stdout, stderr []byte, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// runc keeps its state under /run/containerd/runc/<namespace> unless told: another daemon's
	// container of the same name must not collide with this one.
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", c.sock, "--namespace", "k8s.io",
		"run", "--rm", "--runc-root", c.runcRoot, image, id}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	var in io.WriteCloser
	if stdin != nil {
		if in, err = cmd.StdinPipe(); err != nil {
			return nil, nil, err
		}
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	if in != nil {
		go func() {
			defer in.Close()
			if _, err := in.Write(stdin); err != nil {
				return
			}
			for ctx.Err() == nil && !c.taskRunning(ctx, id) {
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	if err := cmd.Wait(); err != nil {
		return out.Bytes(), errb.Bytes(), fmt.Errorf("ctr run %s %s %s: %w\n%s", image, id, strings.Join(args, " "), err, errb.String())
	}
	return out.Bytes(), errb.Bytes(), nil
}

func (c *containerd) taskRunning(ctx context.Context, id string) bool {
	out, _, err := c.ctr(ctx, nil, "task", "ls")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == id && f[2] == "RUNNING" {
			return true
		}
	}
	return false
}

// removeContainers kills and removes what a failed or timed-out run left, so no shim, task
// or mounted snapshot outlives the daemon.
func (c *containerd) removeContainers() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ids, _, err := c.ctr(ctx, nil, "container", "ls", "-q")
	if err != nil {
		return
	}
	for _, id := range strings.Fields(string(ids)) {
		_, _, _ = c.ctr(ctx, nil, "task", "kill", "--signal", "SIGKILL", id)
		_, _, _ = c.ctr(ctx, nil, "task", "delete", "--force", id)
		_, _, _ = c.ctr(ctx, nil, "container", "delete", id)
	}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
