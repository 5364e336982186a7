package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// process is one control-plane binary running as a child of the test process, with its
// output in <logDir>/<name>.log so a failing run can be diagnosed after the fact.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	log     *os.File
	exited  chan struct{}
	waitErr error
}

func startProcess(logDir, name, bin string, args ...string) (*process, error) {
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return runProcess(name, cmd, filepath.Join(logDir, name+".log"))
}

// runProcess starts cmd with its output in logPath. Pdeathsig: if the test binary is killed
// (go test -timeout, ^C), the program goes with it instead of lingering and holding ports and
// memory on a shared machine. Other SysProcAttr settings of cmd (a chroot) are kept.
func runProcess(name string, cmd *exec.Cmd, logPath string) (*process, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "# %s %q\n", cmd.Path, cmd.Args[1:])
	cmd.Stdout, cmd.Stderr = f, f
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, cmd.Path, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, log: f, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Server is a long-running program a test starts beside the control plane (a GitOps
// controller, the GPU Operator).
type Server struct {
	p *process
	// Log is the file holding its output.
	Log string
}

// Serve starts cmd with its output in logPath and returns once GET readyURL answers 200: at
// once with an error (naming the log) when the program exits first, after timeout when it
// never answers.
func Serve(ctx context.Context, name string, cmd *exec.Cmd, logPath, readyURL string, timeout time.Duration) (*Server, error) {
	p, err := runProcess(name, cmd, logPath)
	if err != nil {
		return nil, err
	}
	s := &Server{p: p, Log: logPath}
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-p.exited:
			return nil, fmt.Errorf("%s exited at start (%v); log: %s", name, p.waitErr, logPath)
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if resp, err := http.Get(readyURL); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("%s not ready at %s after %s; log: %s", name, readyURL, timeout, logPath)
		}
	}
}

// Stop sends SIGTERM and SIGKILL after ten seconds; stopping twice is harmless.
func (s *Server) Stop() { s.p.stop(10 * time.Second) }

// running reports an error if the process already exited: a binary that dies during
// start-up (bad flag, port taken) should fail fast with its log, not after a readiness timeout.
func (p *process) running() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited early (%v); log: %s", p.name, p.waitErr, p.logPath)
	default:
		return nil
	}
}

// stop sends SIGTERM and waits up to grace before SIGKILL: the API server drains slowly on
// SIGTERM, and a test suite should not wait a minute for it.
func (p *process) stop(grace time.Duration) {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(grace):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	p.log.Close()
}

// FreePorts reserves n distinct loopback ports by listening on :0 and closing again. Another
// process could take one in between; the window is small and a start-up failure names the port.
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

var errNotReady = errors.New("not ready")
