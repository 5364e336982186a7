package toolkit

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"

	"github.com/gpupolicy/gpupolicy/plugin/agent/hostfs"
)

var importsLineRE = regexp.MustCompile(`(?m)^imports = .*$`)

// crashEnv makes the test binary an installer that SIGKILLs itself at the N-th write step.
const crashEnv = "GPUPOLICY_INSTALL_CRASH_AT"

func TestMain(m *testing.M) {
	if n := os.Getenv(crashEnv); n != "" {
		os.Exit(crashingInstall(n))
	}
	os.Exit(m.Run())
}

func crashingInstall(n string) int {
	at, _ := strconv.Atoi(n)
	step := 0
	in := newInstaller(os.Getenv("GPUPOLICY_INSTALL_DROPIN"))
	in.Writer = hostfs.Writer{Step: func(string) {
		if step++; step == at {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}}
	if _, err := in.Install(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// The installer is SIGKILLed after every single write step (temp created, half written,
// written, fsynced, renamed, directory synced) of the drop-in, the backup and the main
// config. After each kill, real containerd loads the config and it equals either the state
// before the install or the state after it; a rerun then converges to the new state.
func TestInstallCrashSafety(t *testing.T) {
	if !runInNamespace(t) {
		return
	}
	dropIn := testdata(t, "dropin-v2.toml")
	reset := func() {
		for _, p := range []string{"/etc/containerd/conf.d"} {
			_ = os.RemoveAll(p)
		}
		backups, _ := filepath.Glob(DefaultConfigPath + ".*")
		for _, b := range backups {
			_ = os.Remove(b)
		}
		copyFile(t, testdata(t, "node-v2.toml"), DefaultConfigPath)
	}
	dumpText := func() string {
		out, err := Host{Root: "/"}.dump(context.Background(), "/usr/bin/containerd", DefaultConfigPath)
		if err != nil {
			t.Fatalf("containerd cannot load the config: %v", err)
		}
		// containerd 1.6 reports the files it read in `imports`, in an order that depends on
		// how the list was merged; it is not configuration, so it is left out of the compare.
		return importsLineRE.ReplaceAllString(string(out), "")
	}
	reset()
	oldState := dumpText()
	if _, err := newInstaller(dropIn).Install(context.Background()); err != nil {
		t.Fatal(err)
	}
	newState := dumpText()
	if oldState == newState {
		t.Fatal("install changed nothing")
	}

	kills := 0
	for at := 1; ; at++ {
		reset()
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), crashEnv+"="+strconv.Itoa(at), "GPUPOLICY_INSTALL_DROPIN="+dropIn)
		out, err := cmd.CombinedOutput()
		if err == nil {
			break // the install finished before step `at`: every step was covered
		}
		ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("step %d: installer failed without being killed: %v\n%s", at, err, out)
		}
		kills++
		switch got := dumpText(); got {
		case oldState, newState:
		default:
			t.Fatalf("after SIGKILL at step %d containerd sees neither the old nor the new configuration:\n%s", at, got)
		}
		if _, err := newInstaller(dropIn).Install(context.Background()); err != nil {
			t.Fatalf("rerun after kill at step %d: %v", at, err)
		}
		if got := dumpText(); got != newState {
			t.Fatalf("rerun after kill at step %d did not converge:\n%s\nwant\n%s", at, got, newState)
		}
	}
	if kills < 10 {
		t.Fatalf("only %d kill points exercised", kills)
	}
	t.Logf("killed the installer at %d points", kills)
}
