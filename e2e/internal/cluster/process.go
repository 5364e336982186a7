package cluster

import (
	"errors"
	"fmt"
	"net"
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
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "# %s %q\n", bin, args)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Pdeathsig: if the test binary is killed (go test -timeout, ^C), the control plane goes
	// with it instead of lingering and holding ports and memory on a shared machine.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, log: f, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

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
