// Package mpstest is a stand-in for NVIDIA's nvidia-cuda-mps-control, which comes with the
// driver and cannot run without a GPU: the same command line (-d starts a background control
// daemon; without it, one command is read from stdin and sent to the daemon, and its answer
// printed), the same environment (CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY), a
// "control" entry in the pipe directory while the daemon runs, and control.log lines for the
// commands it was sent. It answers the commands gpupolicy's daemon sends, with NVIDIA's names:
// set/get_default_active_thread_percentage, set/get_default_device_pinned_mem_limit, quit.
//
// A test binary becomes it when it is run under the name nvidia-cuda-mps-control (Main, from
// TestMain), so tests put a symbolic link of that name to os.Executable() on the daemon's path.
package mpstest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Name is the program's name: a test binary run under it is the stand-in.
const Name = "nvidia-cuda-mps-control"

const serveEnv = "GPUPOLICY_MPSTEST_SERVE"

// Main runs the stand-in when the process was started as Name, and reports whether it did
// (then the caller exits with the code).
func Main() (code int, ran bool) {
	if filepath.Base(os.Args[0]) != Name {
		return 0, false
	}
	pipe := os.Getenv("CUDA_MPS_PIPE_DIRECTORY")
	logDir := os.Getenv("CUDA_MPS_LOG_DIRECTORY")
	if pipe == "" {
		pipe = "/tmp/nvidia-mps"
	}
	if logDir == "" {
		logDir = "/var/log/nvidia-mps"
	}
	switch {
	case os.Getenv(serveEnv) == "1":
		return serve(pipe, logDir), true
	case len(os.Args) > 1 && os.Args[1] == "-d":
		return daemonize(pipe), true
	default:
		return client(pipe), true
	}
}

func control(pipe string) string { return filepath.Join(pipe, "control") }

// daemonize starts the server in its own session and returns once its pipe answers.
func daemonize(pipe string) int {
	if c, err := net.Dial("unix", control(pipe)); err == nil {
		c.Close()
		fmt.Fprintln(os.Stderr, "An instance of this daemon is already running")
		return 1
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{Name}
	cmd.Env = append(os.Environ(), serveEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for range 200 {
		if c, err := net.Dial("unix", control(pipe)); err == nil {
			c.Close()
			return 0
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Fprintln(os.Stderr, "the control daemon did not start")
	return 1
}

func serve(pipe, logDir string) int {
	_ = os.Remove(control(pipe))
	ln, err := net.Listen("unix", control(pipe))
	if err != nil {
		return 1
	}
	logf, err := os.OpenFile(filepath.Join(logDir, "control.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return 1
	}
	fmt.Fprintf(logf, "[%s] Control daemon started\n", time.Now().Format(time.DateTime))
	threads := "100.0"
	pinned := map[string]string{}
	for {
		c, err := ln.Accept()
		if err != nil {
			return 1
		}
		b, _ := io.ReadAll(io.LimitReader(c, 4096))
		cmd := strings.Fields(strings.TrimSpace(string(b)))
		fmt.Fprintf(logf, "[%s] CMD %s\n", time.Now().Format(time.DateTime), strings.Join(cmd, " "))
		answer, quit := "", false
		switch {
		case len(cmd) == 2 && cmd[0] == "set_default_active_thread_percentage":
			threads = cmd[1] + ".0"
			answer = threads
		case len(cmd) == 1 && cmd[0] == "get_default_active_thread_percentage":
			answer = threads
		case len(cmd) == 3 && cmd[0] == "set_default_device_pinned_mem_limit":
			pinned[cmd[1]] = cmd[2]
		case len(cmd) == 2 && cmd[0] == "get_default_device_pinned_mem_limit":
			answer = pinned[cmd[1]]
		case len(cmd) == 1 && cmd[0] == "quit":
			quit = true
		default:
			answer = "error: unknown command " + strings.Join(cmd, " ")
		}
		fmt.Fprintln(c, answer)
		c.Close()
		if quit {
			fmt.Fprintf(logf, "[%s] Control daemon exited\n", time.Now().Format(time.DateTime))
			ln.Close()
			return 0
		}
	}
}

func client(pipe string) int {
	cmd, _ := io.ReadAll(os.Stdin)
	c, err := net.Dial("unix", control(pipe))
	if err != nil {
		fmt.Fprintln(os.Stderr, "Cannot find MPS control daemon process")
		return 1
	}
	defer c.Close()
	if _, err := c.Write(cmd); err != nil {
		return 1
	}
	_ = c.(*net.UnixConn).CloseWrite()
	answer, _ := bufio.NewReader(c).ReadString('\n')
	fmt.Print(answer)
	if strings.HasPrefix(answer, "error") {
		return 1
	}
	return 0
}

// Run is a test binary's TestMain body: the stand-in when run as Name, else the tests.
func Run(m *testing.M) int {
	if code, ran := Main(); ran {
		return code
	}
	return m.Run()
}

// Link makes dir/Name, a symbolic link to this test binary, and returns its path.
func Link(dir string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, Name)
	return p, os.Symlink(exe, p)
}
