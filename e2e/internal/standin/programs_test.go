package standin

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/gpupolicy/gpupolicy/e2e/internal/standin/layout"
)

// The stand-in programs run directly (outside containers): their command lines, records and
// refusals. TestStandInsOnContainerd runs them where the node does.

// runProgram runs prog with args, env added and stdin; it returns stdout, stderr and the exit code.
func runProgram(t *testing.T, prog string, stdin string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(prog, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

func TestRuntimeStandInRecordsAndExecsRunc(t *testing.T) {
	rt := program(t, "nvidia-container-runtime")
	dir := t.TempDir()
	records := filepath.Join(dir, "records")
	argvFile := filepath.Join(dir, "runc-argv")
	fakeRunc := filepath.Join(dir, "runc")
	if err := os.WriteFile(fakeRunc, []byte("#!/bin/sh\nprintf '%s\\n' \"$0\" \"$@\" > "+argvFile+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(dir, "bundle")
	spec := []byte(`{"ociVersion":"1.0.2","process":{"args":["/workload"]}}`)
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), spec, 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{RuncEnv + "=" + fakeRunc, RecordDirEnv + "=" + records}

	for _, tc := range []struct {
		name   string
		args   []string
		record string // the container whose spec must be recorded; "" for none
	}{
		{"shim's create", []string{"--root", "/run/containerd/runc/k8s.io", "--log", "/x/log.json", "--log-format", "json", "--systemd-cgroup",
			"create", "--bundle", bundle, "--pid-file", "/x/init.pid", "--console-socket", "/x/c.sock", "--no-pivot", "ctr-1"}, "ctr-1"},
		{"run with -b=", []string{"run", "-b=" + bundle, "--detach", "ctr-2"}, "ctr-2"},
		{"create --bundle=", []string{"--root=/r", "create", "--bundle=" + bundle, "ctr-3"}, "ctr-3"},
		{"start", []string{"--root", "/r", "start", "ctr-1"}, ""},
		{"state", []string{"state", "ctr-1"}, ""},
		{"kill", []string{"kill", "ctr-1", "9"}, ""},
		{"delete", []string{"delete", "--force", "ctr-1"}, ""},
		{"features", []string{"features"}, ""},
		{"version", []string{"--version"}, ""},
		{"no arguments", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(argvFile)
			before, _ := os.ReadDir(records)
			_, stderr, code := runProgram(t, rt, "", env, tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			argv, err := os.ReadFile(argvFile)
			if err != nil {
				t.Fatalf("runc was not run: %v", err)
			}
			if want := strings.Join(append([]string{fakeRunc}, tc.args...), "\n") + "\n"; string(argv) != want {
				t.Errorf("runc's argv\n%s\nwant\n%s", argv, want)
			}
			calls := readCalls(t, filepath.Join(records, CallLog))
			if last := calls[len(calls)-1]; !slices.Equal(last, tc.args) && (len(last) != 0 || len(tc.args) != 0) {
				t.Errorf("last logged call %q, want %q", last, tc.args)
			}
			after, _ := os.ReadDir(records)
			if tc.record == "" {
				if len(after) != len(before) {
					t.Errorf("%q recorded a spec: %v", tc.args, after)
				}
				return
			}
			if got, err := os.ReadFile(filepath.Join(records, tc.record+".json")); err != nil || !bytes.Equal(got, spec) {
				t.Errorf("recorded spec %q, %v; want the bundle's config.json", got, err)
			}
		})
	}

	t.Run("an unwritable record directory fails creates only", func(t *testing.T) {
		notDir := filepath.Join(dir, "not-a-dir")
		if err := os.WriteFile(notDir, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		env := []string{RuncEnv + "=" + fakeRunc, RecordDirEnv + "=" + notDir}
		os.Remove(argvFile)
		if _, stderr, code := runProgram(t, rt, "", env, "delete", "ctr-1"); code != 0 || !strings.Contains(stderr, "warning: call not logged") {
			t.Errorf("delete: exit %d: %s", code, stderr)
		}
		if _, err := os.Stat(argvFile); err != nil {
			t.Error("delete did not reach runc")
		}
		os.Remove(argvFile)
		if _, stderr, code := runProgram(t, rt, "", env, "create", "--bundle", bundle, "ctr-8"); code == 0 || !strings.Contains(stderr, "log the call in "+notDir) {
			t.Errorf("create: exit %d: %s", code, stderr)
		}
		if _, err := os.Stat(argvFile); err == nil {
			t.Error("runc was run for a create the stand-in could not record")
		}
	})

	t.Run("create without a spec fails, naming the container", func(t *testing.T) {
		os.Remove(argvFile)
		_, stderr, code := runProgram(t, rt, "", env, "create", "--bundle", filepath.Join(dir, "nonexistent"), "ctr-9")
		if code == 0 || !strings.Contains(stderr, "OCI spec of container ctr-9") {
			t.Errorf("exit %d: %s", code, stderr)
		}
		if _, err := os.Stat(argvFile); err == nil {
			t.Error("runc was run for a create the stand-in could not record")
		}
	})
}

func TestCTKStandIn(t *testing.T) {
	ctk := program(t, "nvidia-ctk")
	dir := t.TempDir()
	if out, _, code := runProgram(t, ctk, "", nil, "--version"); code != 0 || !strings.Contains(out, "version 1.18.0") {
		t.Errorf("--version: exit %d %q", code, out)
	}
	for _, args := range [][]string{{"cdi", "list"}, {"runtime", "configure"}, {}} {
		if _, stderr, code := runProgram(t, ctk, "", nil, args...); code != 2 || !strings.Contains(stderr, "unsupported command") {
			t.Errorf("%q: exit %d %q", args, code, stderr)
		}
	}
	if _, stderr, code := runProgram(t, ctk, "", nil, "cdi", "generate", "--mode=csv"); code != 1 || !strings.Contains(stderr, `"--mode=csv" not supported`) {
		t.Errorf("unknown flag: exit %d %q", code, stderr)
	}
	if _, stderr, code := runProgram(t, ctk, "", nil, "cdi", "generate", "--driver-root="+filepath.Join(dir, "none")); code != 1 || !strings.Contains(stderr, "--driver-root") {
		t.Errorf("missing driver root: exit %d %q", code, stderr)
	}

	// The agent's command line (plugin/agent/toolkit/cdi.go), as TestStandInsOnContainerd runs
	// it through the agent itself.
	hook := "/usr/local/nvidia/toolkit/nvidia-cdi-hook"
	out := filepath.Join(dir, "cdi-candidate.yaml")
	if _, stderr, code := runProgram(t, ctk, "", nil, "cdi", "generate", "--device-name-strategy=uuid", "--output="+out, "--nvidia-cdi-hook-path="+hook, "--driver-root=/"); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	checkCDISpec(t, b, hook)

	// nvidia-ctk's defaults: index names, YAML, the extension appended; JSON on request; the
	// hook is nvidia-ctk itself with --nvidia-ctk-path.
	if _, stderr, code := runProgram(t, ctk, "", nil, "cdi", "generate", "--output", filepath.Join(dir, "plain")); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "plain.yaml")); err != nil || !strings.Contains(string(b), "- containerEdits:\n    env:\n    - GPUPOLICY_E2E_CDI_DEVICE=") || !strings.Contains(string(b), "name: \"0\"") {
		t.Errorf("index-named YAML spec: %v\n%s", err, b)
	}
	stdout, stderr, code := runProgram(t, ctk, "", nil, "cdi", "generate", "--format=json", "--nvidia-ctk-path=/opt/nvidia-ctk")
	var spec struct {
		ContainerEdits struct {
			Hooks []struct {
				Path string   `json:"path"`
				Args []string `json:"args"`
			} `json:"hooks"`
		} `json:"containerEdits"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &spec) != nil || len(spec.ContainerEdits.Hooks) != 1 ||
		spec.ContainerEdits.Hooks[0].Path != "/opt/nvidia-ctk" || !slices.Equal(spec.ContainerEdits.Hooks[0].Args, []string{"nvidia-ctk", "hook", "update-ldcache"}) {
		t.Errorf("JSON spec with --nvidia-ctk-path: exit %d %s\n%s", code, stderr, stdout)
	}
}

func TestCDIHookStandIn(t *testing.T) {
	records := t.TempDir()
	env := []string{RecordDirEnv + "=" + records}
	state := `{"ociVersion":"1.0.2","id":"ctr-1","pid":42,"bundle":"/b"}`
	if _, stderr, code := runProgram(t, program(t, "nvidia-cdi-hook"), state, env, "update-ldcache", "--folder", "/usr/lib"); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if _, stderr, code := runProgram(t, program(t, "nvidia-ctk"), state, env, "hook", "create-symlinks"); code != 0 {
		t.Fatalf("nvidia-ctk hook: exit %d: %s", code, stderr)
	}
	b, _ := os.ReadFile(filepath.Join(records, HookLog))
	want := `{"args":["update-ldcache","--folder","/usr/lib"],"bundle":"/b","id":"ctr-1"}` + "\n" + `{"args":["create-symlinks"],"bundle":"/b","id":"ctr-1"}` + "\n"
	if string(b) != want {
		t.Errorf("hook log\n%s\nwant\n%s", b, want)
	}
	if _, stderr, code := runProgram(t, program(t, "nvidia-cdi-hook"), state, env, "inject-everything"); code != 2 || !strings.Contains(stderr, "unsupported hook") {
		t.Errorf("unknown hook: exit %d %s", code, stderr)
	}
}

func TestToolkitInstallerStandInRefuses(t *testing.T) {
	installer := program(t, "nvidia-ctk-installer")
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		env  []string
		args []string
		want string
	}{
		"unset":         {env: []string{"TOOLKIT_INSTALL_DIR="}, want: `TOOLKIT_INSTALL_DIR="": set it`},
		"relative":      {env: []string{"TOOLKIT_INSTALL_DIR=usr/local/nvidia"}, want: "absolute path"},
		"not writable":  {env: []string{"TOOLKIT_INSTALL_DIR=" + file}, want: "TOOLKIT_INSTALL_DIR=" + file + " is not writable"},
		"bad NO_DAEMON": {env: []string{"TOOLKIT_INSTALL_DIR=/x", "NO_DAEMON=yes please"}, want: "NO_DAEMON"},
		"arguments":     {env: []string{"TOOLKIT_INSTALL_DIR=/x"}, args: []string{"--toolkit-root=/x"}, want: "takes no arguments"},
	} {
		t.Run(name, func(t *testing.T) {
			_, stderr, code := runProgram(t, installer, "", tc.env, tc.args...)
			if code != 1 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit 1 naming %q", code, stderr, tc.want)
			}
		})
	}
}

// TestWorkloadAndPauseStopOnSIGTERM: the workload prints its environment sorted and waits;
// both exit 0 on SIGTERM (what the kubelet sends).
func TestWorkloadAndPauseStopOnSIGTERM(t *testing.T) {
	for _, name := range []string{"workload", "pause"} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(program(t, name))
			cmd.Env = []string{"ZED=last", "NVIDIA_VISIBLE_DEVICES=GPU-1", "ALPHA=first"}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if name == "pause" {
				out, err = cmd.StderrPipe()
				if err != nil {
					t.Fatal(err)
				}
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var lines []string
			sc := bufio.NewScanner(out)
			for sc.Scan() && sc.Text() != layout.WorkloadReady && sc.Text() != layout.PauseReady {
				lines = append(lines, sc.Text())
			}
			want := []string{EnvPrefix + "ALPHA=first", EnvPrefix + "NVIDIA_VISIBLE_DEVICES=GPU-1", EnvPrefix + "ZED=last"}
			if name == "pause" {
				want = nil
			}
			if !slices.Equal(lines, want) {
				t.Errorf("%s printed %q, want %q", name, lines, want)
			}
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("%s on SIGTERM: %v", name, err)
			}
		})
	}
}

func TestUnknownProgramName(t *testing.T) {
	_, stderr, code := runProgram(t, program(t, "standin"), "", nil, "nvidia-smi")
	if code != 2 || !strings.Contains(stderr, `unknown program "nvidia-smi"`) || !strings.Contains(stderr, "nvidia-container-runtime") {
		t.Errorf("exit %d: %s", code, stderr)
	}
}

// TestCDIHookRunsUnderRunc: runc runs the hook stand-in as a createContainer hook, as it will
// once containerd 2.1 has applied the nvidia-ctk stand-in's spec: state on stdin, the hook's
// own environment only.
func TestCDIHookRunsUnderRunc(t *testing.T) {
	needNode(t)
	_, bin := buildImages(t)
	dir, err := os.MkdirTemp("", "standin-runc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bundle, records := filepath.Join(dir, "bundle"), filepath.Join(dir, "records")
	hook := filepath.Join(dir, "nvidia-cdi-hook")
	for p, b := range map[string][]byte{hook: bin, filepath.Join(bundle, "rootfs", "nvidia-ctk"): bin} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command(HostRunc, "spec", "--bundle", bundle).CombinedOutput(); err != nil {
		t.Fatalf("runc spec: %v\n%s", err, out)
	}
	var spec map[string]any
	if err := json.Unmarshal(must(os.ReadFile(filepath.Join(bundle, "config.json"))), &spec); err != nil {
		t.Fatal(err)
	}
	process := spec["process"].(map[string]any)
	process["terminal"], process["args"] = false, []string{"/nvidia-ctk", "--version"}
	spec["hooks"] = map[string]any{"createContainer": []map[string]any{{
		"path": hook, "args": []string{"nvidia-cdi-hook", "update-ldcache"}, "env": []string{RecordDirEnv + "=" + records},
	}}}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), must(json.Marshal(spec)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(HostRunc, "--root", filepath.Join(dir, "runc-root"), "run", "--bundle", bundle, "hooked")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "version 1.18.0") {
		t.Fatalf("runc run: %v\n%s", err, out)
	}
	want := `{"args":["update-ldcache"],"bundle":"` + bundle + `","id":"hooked"}` + "\n"
	if got, _ := os.ReadFile(filepath.Join(records, HookLog)); string(got) != want {
		t.Errorf("hook log %q, want %q", got, want)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
