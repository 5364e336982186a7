package toolkit

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// daemon is a real containerd serving DefaultContainerdSocket (a private /run/containerd in
// the test's mount namespace) from its own root and state directories, reading the node's
// /etc/containerd/config.toml. Like systemd's Restart=always, it is started again whenever it
// exits, until the test ends.
type daemon struct {
	t      *testing.T
	bin    string
	dir    string
	mu     sync.Mutex
	cmd    *exec.Cmd
	starts int
	stop   bool
	exited chan struct{} // closed and replaced on every exit
	done   chan struct{}
}

// startDaemon starts a supervised containerd and waits until its CRI answers.
func startDaemon(t *testing.T, bin string) *daemon {
	t.Helper()
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("runc is not installed")
	}
	d := &daemon{t: t, bin: bin, dir: t.TempDir(), exited: make(chan struct{}), done: make(chan struct{})}
	go d.supervise()
	t.Cleanup(d.shutdown)
	d.waitCRI()
	return d
}

func (d *daemon) supervise() {
	defer close(d.done)
	for {
		d.mu.Lock()
		if d.stop {
			d.mu.Unlock()
			return
		}
		cmd := exec.Command(d.bin, "--config", DefaultConfigPath, "--address", DefaultContainerdSocket,
			"--root", filepath.Join(d.dir, "root"), "--state", filepath.Join(d.dir, "state"), "--log-level", "warn")
		log, err := os.OpenFile(filepath.Join(d.dir, "containerd.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			d.mu.Unlock()
			d.t.Error(err)
			return
		}
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			d.mu.Unlock()
			log.Close()
			d.t.Error(err)
			return
		}
		d.cmd, d.starts = cmd, d.starts+1
		d.mu.Unlock()
		_ = cmd.Wait()
		log.Close()
		d.mu.Lock()
		close(d.exited)
		d.exited = make(chan struct{})
		d.mu.Unlock()
		if !d.stopping() {
			time.Sleep(100 * time.Millisecond) // systemd's RestartSec, shortened
		}
	}
}

func (d *daemon) stopping() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stop
}

// pid is the running process's PID.
func (d *daemon) pid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cmd.Process.Pid
}

// restart stops the running process (SIGTERM, as systemctl restart does) and waits until its
// successor's CRI answers.
func (d *daemon) restart() {
	d.t.Helper()
	d.mu.Lock()
	exited, p := d.exited, d.cmd.Process
	d.mu.Unlock()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		d.t.Fatal(err)
	}
	<-exited
	d.waitCRI()
}

// waitCRI waits until a containerd answers on the socket, failing with its log after 20 s.
func (d *daemon) waitCRI() {
	d.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := queryCRI(context.Background(), DefaultContainerdSocket, DefaultContainerdSocket); err == nil {
			return
		} else if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(d.dir, "containerd.log"))
			d.t.Fatalf("containerd %s did not answer on %s: %v\n%s", d.bin, DefaultContainerdSocket, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (d *daemon) shutdown() {
	d.mu.Lock()
	d.stop = true
	if d.cmd != nil && d.cmd.Process != nil {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
	}
	d.mu.Unlock()
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		d.mu.Lock()
		_ = d.cmd.Process.Kill()
		d.mu.Unlock()
		<-d.done
	}
}

// noRestart stops supervising: the running process keeps running, but once it exits nothing
// starts it again (a unit without Restart=, or a failed start).
func (d *daemon) noRestart() {
	d.mu.Lock()
	d.stop = true
	d.mu.Unlock()
}
