package toolkit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/nodefacts/hostfacts"
)

// --watch under restart-mode none against a real, supervised containerd 1.6: the install is
// not verified until a person restarts containerd, and that restart is seen at once (the
// re-created socket), not at the next (here one-hour) interval.
func TestWatchSeesManualRestart(t *testing.T) {
	if !runInNamespaces(t, "--pid", "--fork", "--mount-proc") {
		return
	}
	copyFile(t, testdata(t, "node-v2.toml"), DefaultConfigPath)
	installRuntime(t, renderedRuntime)
	d := startDaemon(t, "/usr/bin/containerd")
	in := &Installer{HostRoot: "/", DropInSource: testdata(t, "dropin-v2.toml"), ContainerdVersion: "1.6",
		ContainerdBinary: "/usr/bin/containerd", RestartMode: RestartNone, ProcDir: "/proc", RestartTimeout: 20 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var results []Result
	done := make(chan error, 1)
	go func() {
		done <- in.Watch(ctx, time.Hour, func(res Result, err error) {
			if err != nil && ctx.Err() == nil {
				t.Errorf("watch pass: %v", err)
			}
			mu.Lock()
			results = append(results, res)
			mu.Unlock()
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("Watch ended with %v", err)
		}
	}()
	last := func() (Result, int) {
		mu.Lock()
		defer mu.Unlock()
		if len(results) == 0 {
			return Result{}, 0
		}
		return results[len(results)-1], len(results)
	}
	waitFor := func(what string, cond func(Result) bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if res, n := last(); n > 0 && cond(res) {
				return
			}
		}
		res, n := last()
		t.Fatalf("timed out waiting for %s (%d passes, last %+v)", what, n, res)
	}
	waitFor("the first install, not verified", func(r Result) bool { return !r.Verified && contains(r.Reason, "restart containerd") })

	d.restart()
	waitFor("verified after the manual restart", func(r Result) bool { return r.Verified })
	st, err := hostfacts.ReadToolkitStatus("/")
	if err != nil || !st.Verified {
		t.Fatalf("status after the restart: %+v %v", st, err)
	}
}
