package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary is gpupolicy-fn itself when runAsMain is set: the tests below start it as a
// process, so signals, the collector settings and exit codes are the real ones.
const runAsMain = "GPUPOLICY_FN_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runAsMain) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// gpupolicyFn is a command running this binary as gpupolicy-fn.
func gpupolicyFn(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runAsMain+"=1")
	return cmd
}

// policyWithPools is a policy with n single-label node pools (1,000 is the limit).
func policyWithPools(n int) []byte {
	var b strings.Builder
	b.WriteString("apiVersion: gpupolicy.dev/v1alpha1\nkind: GPUPolicy\nmetadata:\n  name: fleet\nspec:\n  kubernetesVersion: \"1.34\"\n  driver: {version: \"580.95.05\"}\n  cuda: {version: \"12.8\"}\n  nodePools:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - name: pool-%d\n    nodeSelector: {gpupolicy.dev/pool: pool-%d}\n", i, i)
	}
	return []byte(b.String())
}

// readTree is every file under dir by relative path.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// renderTrees renders the old tree (one node pool) into work/out and returns it, the tree
// the large policy (1,000 pools) renders, both policies' paths and out.
func renderTrees(t *testing.T, work string) (oldTree, newTree map[string]string, small, large, out string) {
	t.Helper()
	small, large = filepath.Join(work, "small.yaml"), filepath.Join(work, "large.yaml")
	out = filepath.Join(work, "out")
	for f, n := range map[string]int{small: 1, large: 1000} {
		if err := os.WriteFile(f, policyWithPools(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ref := filepath.Join(work, "ref")
	for _, r := range [][2]string{{large, ref}, {small, out}} {
		if o, err := gpupolicyFn("render", "-f", r[0], "-o", r[1]).CombinedOutput(); err != nil {
			t.Fatalf("render %s: %v\n%s", r[0], err, o)
		}
	}
	newTree = readTree(t, ref)
	return readTree(t, out), newTree, small, large, out
}

// noLeftovers fails if a temporary tree of the writer is left beside out.
func noLeftovers(t *testing.T, out string) {
	t.Helper()
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".out.*"))
	if len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestRenderStopsOnSignal: SIGINT or SIGTERM to `gpupolicy-fn render` while it works on the
// largest policy the limits allow ends it promptly with "interrupted" and exit 1, and the
// output directory holds the old tree or, when the signal came after the swap, the whole new
// one: never a mix, never a temporary tree left behind. (The render used to discard its
// context: the signal was caught and ignored, the tree written anyway.)
func TestRenderStopsOnSignal(t *testing.T) {
	work := t.TempDir()
	oldTree, newTree, small, large, out := renderTrees(t, work)
	var interrupted, completed int
	var slowest time.Duration
	policy, err := os.ReadFile(large)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		sig := []os.Signal{os.Interrupt, syscall.SIGTERM}[i%2]
		// The policy comes through a FIFO: render has opened it, so its handler (set up first
		// thing) is in place, by the time the test has written it. A signal before that would
		// meet the default action, whatever the machine's load made of a fixed wait.
		fifo := filepath.Join(work, fmt.Sprintf("large-%d.yaml", i))
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Skip("no FIFOs here:", err)
		}
		cmd := gpupolicyFn("render", "-f", fifo, "-o", out)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		writeFIFO(t, fifo, policy)
		// From right after reading the policy to late in the write.
		time.Sleep(time.Duration(i) * 150 * time.Millisecond)
		sent := time.Now()
		_ = cmd.Process.Signal(sig)
		err := cmd.Wait()
		slowest = max(slowest, time.Since(sent))
		got := readTree(t, out)
		var exit *exec.ExitError
		switch {
		case err == nil && sameTree(got, newTree):
			completed++ // the signal came after the swap; put the old tree back for the next run
			if o, err := gpupolicyFn("render", "-f", small, "-o", out).CombinedOutput(); err != nil {
				t.Fatalf("render %s: %v\n%s", small, err, o)
			}
		case errors.As(err, &exit) && exit.ExitCode() == 1 && strings.Contains(stderr.String(), "render: interrupted") && sameTree(got, oldTree):
			interrupted++
		default:
			t.Fatalf("run %d (%v): %v, stderr:\n%s\ntree: %d files (old %d, new %d), old kept %v", i, sig, err, stderr.String(), len(got), len(oldTree), len(newTree), sameTree(got, oldTree))
		}
		noLeftovers(t, out)
	}
	t.Logf("%d interrupted, %d completed; slowest exit after the signal: %v", interrupted, completed, slowest)
	if interrupted == 0 {
		t.Error("no run was interrupted")
	}
	// A bound for a render that went on writing; how fast it stops is BENCHMARKS.md's business.
	if slowest > 30*time.Second {
		t.Errorf("render took %v to stop after a signal", slowest)
	}
}

// writeFIFO writes data into the FIFO path once a reader has opened it (30 s at most), then
// closes it.
func writeFIFO(t *testing.T, path string, data []byte) {
	t.Helper()
	var w *os.File
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var err error
		// O_NONBLOCK: open fails with ENXIO, instead of blocking, until the reader has it open.
		if w, err = os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			break
		}
		if !errors.Is(err, syscall.ENXIO) || time.Now().After(deadline) {
			t.Fatalf("the render did not open %s within 30s: %v", path, err)
		}
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// waitInSyscall returns once a thread of process pid is blocked in system call nr (its
// /proc/PID/task/TID/syscall names it), failing after 30 s.
func waitInSyscall(t *testing.T, pid int, nr uintptr, what string) {
	t.Helper()
	prefix := fmt.Sprintf("%d ", nr)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/syscall", pid))
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && strings.HasPrefix(string(b), prefix) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d not %s within 30s", pid, what)
		}
	}
}

// TestKRMCallEndsOnSignal: the KRM call keeps the default action of SIGTERM and SIGINT, so
// a function waiting for a ResourceList that never comes ends at once, killed by the signal,
// with nothing on stdout. (With the render's handler it caught the first signal and waited on.)
func TestKRMCallEndsOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		cmd := gpupolicyFn()
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stdout bytes.Buffer
		cmd.Stdout = &stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		_, _ = stdin.Write([]byte("apiVersion: config.kubernetes.io/v1\n")) // then nothing: it blocks reading
		time.Sleep(200 * time.Millisecond)
		_ = cmd.Process.Signal(sig)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != sig || stdout.Len() != 0 {
				t.Fatalf("%v: %v, stdout %q; want killed by the signal, nothing written", sig, err, stdout.String())
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("the KRM call kept waiting for stdin after %v", sig)
		}
		stdin.Close()
	}
}

// TestRenderStopsOnAPipe: a render blocked on a FIFO nobody writes ends on the signal instead of
// hanging with the signal caught — both while reading it (a writer opened it and sends nothing)
// and while opening it (no writer yet: open(2) itself blocks).
func TestRenderStopsOnAPipe(t *testing.T) {
	for _, c := range []struct {
		name   string
		writer bool
		signal os.Signal
	}{
		{"reading", true, os.Interrupt},
		{"opening", false, syscall.SIGTERM},
	} {
		t.Run(c.name, func(t *testing.T) {
			work := t.TempDir()
			fifo := filepath.Join(work, "policy.yaml")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Skip("no FIFOs here:", err)
			}
			cmd := gpupolicyFn("render", "-f", fifo, "-o", filepath.Join(work, "out"))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if c.writer {
				w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // returns once render has opened it
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
			} else {
				waitInSyscall(t, cmd.Process.Pid, syscall.SYS_OPENAT, "blocked opening the FIFO")
			}
			_ = cmd.Process.Signal(c.signal)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				var exit *exec.ExitError
				if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(stderr.String(), "interrupted") {
					t.Fatalf("%v, stderr: %s", err, stderr.String())
				}
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatalf("render kept %s the pipe after %v", c.name, c.signal)
			}
			if _, err := os.Stat(filepath.Join(work, "out")); !os.IsNotExist(err) {
				t.Errorf("out was written: %v", err)
			}
		})
	}
}

// TestRenderRefusesOversizedInput: a policy over 1 MiB is refused before it is parsed, naming
// the file and the limit, through a file and through a pipe.
func TestRenderRefusesOversizedInput(t *testing.T) {
	work := t.TempDir()
	big := filepath.Join(work, "big.yaml")
	data := append(policyWithPools(1), bytes.Repeat([]byte("# padding\n"), 120_000)...)
	if err := os.WriteFile(big, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		args  []string
		stdin []byte
	}{
		{"file", []string{"render", "-f", big, "-o", filepath.Join(work, "out")}, nil},
		{"pipe", []string{"render", "-f", "/dev/stdin", "-o", filepath.Join(work, "out")}, data},
	} {
		cmd := gpupolicyFn(c.args...)
		cmd.Stdin = bytes.NewReader(c.stdin)
		o, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(o), "over the 1 MiB limit") {
			t.Errorf("%s: %v\n%s", c.name, err, o)
		}
	}
	if _, err := os.Stat(filepath.Join(work, "out")); !os.IsNotExist(err) {
		t.Errorf("out was written: %v", err)
	}
}
