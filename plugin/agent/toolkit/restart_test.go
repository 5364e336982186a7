package toolkit

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// supervisor keeps a process named "containerd" running, as systemd's Restart=always does:
// a copy of sleep under that name, so /proc shows it with a real start time.
type supervisor struct {
	bin     string
	mu      sync.Mutex
	cmd     *exec.Cmd
	stopped bool
	done    chan struct{}
}

func startSupervisor(t *testing.T) *supervisor {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	bin := filepath.Join(t.TempDir(), "containerd")
	copyFile(t, sleep, bin)
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &supervisor{bin: bin, done: make(chan struct{})}
	go s.loop(t)
	t.Cleanup(s.stop)
	time.Sleep(200 * time.Millisecond)
	return s
}

func (s *supervisor) loop(t *testing.T) {
	defer close(s.done)
	for {
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			return
		}
		s.cmd = exec.Command(s.bin, "3600")
		if err := s.cmd.Start(); err != nil {
			s.mu.Unlock()
			t.Error(err)
			return
		}
		cmd := s.cmd
		s.mu.Unlock()
		_ = cmd.Wait()
	}
}

func (s *supervisor) stop() {
	s.mu.Lock()
	s.stopped = true
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
	}
	s.mu.Unlock()
	<-s.done
}

// With a running containerd (in a PID namespace, so only ours is visible): restart-mode
// none leaves the gate closed while containerd runs an older config; signal restarts it and
// the status is written only once a containerd started after the drop-in is running.
func TestRestartAndVerifyRunningContainerd(t *testing.T) {
	if !runInNamespaces(t, "--pid", "--fork", "--mount-proc") {
		return
	}
	startSupervisor(t)
	copyFile(t, testdata(t, "node-v2.toml"), DefaultConfigPath)
	ctx := context.Background()
	in := newInstaller(testdata(t, "dropin-v2.toml"))
	in.ProcDir = "/proc"

	res, err := in.Install(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Verified || res.Restarted || !strings.Contains(res.Reason, "older than") {
		t.Fatalf("restart-mode none: %+v", res)
	}
	if _, err := ReadStatus("/"); err != ErrNoStatus {
		t.Fatalf("status written for an unloaded handler: %v", err)
	}

	in.RestartMode, in.RestartTimeout = RestartSignal, 20*time.Second
	res, err = in.Install(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed || !res.Restarted || !res.Verified || !strings.Contains(res.Status.VerifiedBy, "running containerd started after") {
		t.Fatalf("restart-mode signal after an earlier unloaded write: %+v", res)
	}
	res, err = in.Install(ctx)
	if err != nil || res.Restarted || res.Changed || !res.Verified {
		t.Fatalf("steady state restarted or changed: %+v %v", res, err)
	}
}
