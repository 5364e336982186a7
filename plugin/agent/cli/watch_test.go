package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/agent/wake"
	"github.com/gpupolicy/gpupolicy/plugin/nodefacts/hostfacts"
)

// runAsync runs a command line until cancel; the returned channel yields its exit code.
func runAsync(args ...string) (context.CancelFunc, <-chan int) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- Main(ctx, args, io.Discard, &bytes.Buffer{}) }()
	return cancel, done
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("no %s within 30s", what)
}

// --watch re-installs a drop-in someone deleted as soon as it is gone (the interval here is an
// hour), and a stop (SIGTERM) leaves it in place.
func TestToolkitWatchReappliesAndNeverUninstalls(t *testing.T) {
	root, dropIn, proc := toolkitHost(t)
	installed := filepath.Join(root, "etc/containerd/conf.d/99-gpupolicy-nvidia.toml")
	exists := func() bool { _, err := os.Stat(installed); return err == nil }

	cancel, done := runAsync("toolkit", "install", "--host-root", root, "--drop-in", dropIn, "--containerd-version", "2.1",
		"--restart-mode", "none", "--containerd-bin", "none", "--proc", proc, "--watch", "1h")
	eventually(t, "first install", exists)
	if err := os.Remove(installed); err != nil {
		t.Fatal(err)
	}
	eventually(t, "re-install after the node drifted", exists)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d on stop", code)
	}
	if !exists() {
		t.Fatal("stopping the installer removed the drop-in")
	}
}

// The validator's readiness says the validator works, not what it found: Ready with the
// verdict as the body on a node without the module, with another branch and with the expected
// driver alike (the gate holds a bad node back; an unready pod would stall the whole fleet's
// driver stage under Flux's wait and Argo CD's waves). Each change is checked at once although
// the interval is an hour: the validator wakes on the gate's sources (here the version file,
// a plain file under the fake host root, through inotify; on a node, the module's uevents).
func TestDriverWatchReadiness(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	root := t.TempDir()
	version := filepath.Join(root, hostfacts.KernelDriverFile)
	_ = os.MkdirAll(filepath.Dir(version), 0o755)
	setDriver := func(v string) {
		_ = os.WriteFile(version, []byte("NVRM version: NVIDIA UNIX x86_64 Kernel Module  "+v+"  Tue Sep 30 00:00:00 UTC 2025\n"), 0o644)
	}
	cancel, done := runAsync("driver", "--config", writeConfig(t, agentYAML), "--host-root", root, "--node", "",
		"--watch", "--interval", "1h", "--listen", addr)
	defer func() { cancel(); <-done }()
	status := func() (int, string) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	verdict := func(what, want string) {
		t.Helper()
		eventually(t, what, func() bool { c, b := status(); return c == 200 && strings.Contains(b, want) })
	}
	verdict("Ready with no module loaded", "does not satisfy the policy (the gate keeps this node's later stages closed; see the node's GPUStackReady condition): NVIDIA kernel module not loaded")
	setDriver("570.172.08")
	verdict("Ready on another branch", "does not satisfy the policy (the gate keeps this node's later stages closed; see the node's GPUStackReady condition): drift: driver 570.172.08")
	setDriver("580.95.05")
	verdict("Ready once the expected driver is loaded", "verdict: driver satisfies the policy: driver 580.95.05")
}

// The gate reloads when the ConfigMap volume changes, as the kubelet changes it: a new
// timestamped directory and an atomic swap of the ..data link, seen without waiting for the
// (here one-hour) resync.
func TestCancelOnConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	swap := func(gen, body string) {
		d := filepath.Join(dir, "..2026_"+gen)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "config.yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Base(d), filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	swap("1", agentYAML)
	path := filepath.Join(dir, "config.yaml")
	if err := os.Symlink("..data/config.yaml", path); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reload := wake.New()
	if err := wake.New().Files(ctx, slog.Default(), t.TempDir(), configDir(path, reload)); err != nil {
		t.Fatal(err)
	}
	go cancelOnChange(ctx, cancel, path, []byte(agentYAML), reload, time.Hour)
	// A write that leaves the bytes as they were does not reload.
	swap("2", agentYAML)
	time.Sleep(50 * time.Millisecond)
	if ctx.Err() != nil {
		t.Fatal("cancelled without a change")
	}
	swap("3", agentYAML+"# new policy\n")
	eventually(t, "cancel after the ConfigMap swap", func() bool { return ctx.Err() != nil })
}
