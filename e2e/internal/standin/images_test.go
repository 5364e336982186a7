package standin

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/plugin/agent/toolkit"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// The images are built once per test binary; Go's build cache makes that a link.
var buildOnce struct {
	sync.Once
	dir   string
	built []Built
	bin   []byte
	err   error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildOnce.dir != "" {
		os.RemoveAll(buildOnce.dir)
	}
	os.Exit(code)
}

// buildImages returns the archives of BuildAll and the stand-in binary they hold.
func buildImages(t *testing.T) ([]Built, []byte) {
	t.Helper()
	buildOnce.Do(func() {
		if buildOnce.dir, buildOnce.err = os.MkdirTemp("", "standin-build-"); buildOnce.err != nil {
			return
		}
		start := time.Now()
		buildOnce.built, buildOnce.err = BuildAll(context.Background(), buildOnce.dir, DefaultToolkitRef)
		t.Logf("BuildAll took %s", time.Since(start).Round(time.Millisecond))
		if buildOnce.err == nil {
			buildOnce.bin, buildOnce.err = os.ReadFile(filepath.Join(buildOnce.dir, "standin"))
		}
	})
	if buildOnce.err != nil {
		t.Fatal(buildOnce.err)
	}
	return buildOnce.built, buildOnce.bin
}

// program is the stand-in binary installed under name in a temp dir, to run outside a container.
func program(t *testing.T, name string) string {
	t.Helper()
	_, bin := buildImages(t)
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// task is a container run in the foreground by ctr, in the background of the test.
type task struct {
	id   string
	out  *syncBuffer
	done chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs `ctr run --rm ARGS... REF ID` and returns at once.
func (c *containerd) start(t *testing.T, id string, args ...string) *task {
	t.Helper()
	tk := &task{id: id, out: &syncBuffer{}, done: make(chan error, 1)}
	cmd := exec.Command(c.ctrBin, append([]string{"-a", c.sock, "-n", "k8s.io", "run", "--rm"}, append(args, id)...)...)
	cmd.Stdout, cmd.Stderr = tk.out, tk.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { tk.done <- cmd.Wait() }()
	return tk
}

// waitFor waits until the task printed want; it fails the test if the task exits first.
func (tk *task) waitFor(t *testing.T, want string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(tk.out.String(), want); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-tk.done:
			t.Fatalf("container %s exited (%v) before printing %q:\n%s", tk.id, err, want, tk.out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s did not print %q:\n%s", tk.id, want, tk.out)
		}
	}
}

// stop sends SIGTERM and fails the test unless the container exits 0.
func (tk *task) stop(t *testing.T, c *containerd) {
	t.Helper()
	c.ctr(t, "task", "kill", "-s", "SIGTERM", tk.id)
	select {
	case err := <-tk.done:
		if err != nil {
			t.Fatalf("container %s exited with %v on SIGTERM:\n%s", tk.id, err, tk.out)
		}
	case <-time.After(time.Minute):
		t.Fatalf("container %s ignored SIGTERM", tk.id)
	}
}

// TestStandInsOnContainerd imports every image into a real containerd (1.6 and 2.x) and runs each the
// way the real node does: pause until SIGTERM; the toolkit stand-in installing into a host
// directory; the workload through the installed nvidia-container-runtime, whose record of the
// OCI spec and calls is read back; and gpupolicy's own agent generating and checking the CDI
// spec with the installed nvidia-ctk.
func TestStandInsOnContainerd(t *testing.T) {
	needNode(t)
	built, bin := buildImages(t)
	forEachContainerd(t, func(t *testing.T, start func(...string) *containerd) {
		records := t.TempDir()
		testStandIns(t, start(RecordDirEnv+"="+records), built, bin, records)
	})
}

func testStandIns(t *testing.T, c *containerd, built []Built, bin []byte, records string) {
	refs := map[string]bool{}
	for _, b := range built {
		c.importImage(t, b.Tar, b.Ref)
		refs[b.Ref] = true
	}
	for _, ref := range []string{DefaultPauseRef, DefaultToolkitRef, DefaultWorkloadRef} {
		if !refs[ref] {
			t.Fatalf("BuildAll built %v, not %s", built, ref)
		}
	}
	hostRoot := t.TempDir()
	installDir := filepath.Join(hostRoot, "usr/local/nvidia")
	if err := os.MkdirAll(installDir, 0o755); err != nil {
		t.Fatal(err)
	}
	toolkitDir := filepath.Join(installDir, ToolkitSubdir)

	t.Run("pause runs until SIGTERM", func(t *testing.T) {
		tk := c.start(t, "pause", DefaultPauseRef)
		for deadline := time.Now().Add(time.Minute); !strings.Contains(c.ctr(t, "task", "ls"), "RUNNING"); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("pause is not running:\n%s\n%s", c.ctr(t, "task", "ls"), tk.out)
			}
		}
		tk.stop(t, c)
	})

	t.Run("toolkit installer needs TOOLKIT_INSTALL_DIR", func(t *testing.T) {
		out, err := c.ctrErr("run", "--rm", "--env", "NO_DAEMON=true", DefaultToolkitRef, "toolkit-unset")
		if err == nil || !strings.Contains(out+err.Error(), "TOOLKIT_INSTALL_DIR") {
			t.Fatalf("without TOOLKIT_INSTALL_DIR: %v\n%s", err, out)
		}
	})

	t.Run("toolkit installer copies the binaries", func(t *testing.T) {
		// The env of gpupolicy's toolkit-copy init container; RUNTIME_CONFIG points into the
		// host directory, so a stand-in that wrote containerd config would be seen.
		runtimeConfig := "/usr/local/nvidia/containerd-config.toml"
		out := c.ctr(t, "run", "--rm",
			"--mount", "type=bind,src="+installDir+",dst=/usr/local/nvidia,options=rbind:rw",
			"--env", "NO_DAEMON=true", "--env", "NO_RUNTIME_CONFIG=true", "--env", "RUNTIME=containerd",
			"--env", "RUNTIME_CONFIG="+runtimeConfig, "--env", "CONTAINERD_CONFIG="+runtimeConfig,
			"--env", "RUNTIME_RESTART_MODE=none", "--env", "TOOLKIT_INSTALL_DIR=/usr/local/nvidia", "--env", "CDI_ENABLED=true",
			DefaultToolkitRef, "toolkit-copy")
		for _, name := range ToolkitBinaries {
			p := filepath.Join(toolkitDir, name)
			st, err := os.Stat(p)
			if err != nil {
				t.Fatalf("installer printed\n%s\nbut: %v", out, err)
			}
			if st.Mode().Perm() != 0o755 {
				t.Errorf("%s: mode %v, want 0755", p, st.Mode())
			}
			if b, _ := os.ReadFile(p); !bytes.Equal(b, bin) {
				t.Errorf("%s is not the stand-in binary", p)
			}
		}
		if _, err := os.Stat(filepath.Join(installDir, "containerd-config.toml")); err == nil {
			t.Error("the toolkit stand-in wrote a containerd config")
		}
	})

	t.Run("workload runs through the installed nvidia-container-runtime", func(t *testing.T) {
		runtime := filepath.Join(toolkitDir, "nvidia-container-runtime")
		tk := c.start(t, "gpu-workload", "--runc-binary", runtime, "--env", "NVIDIA_VISIBLE_DEVICES=GPU-e2e", DefaultWorkloadRef)
		tk.waitFor(t, WorkloadReady)
		tk.stop(t, c)
		if !strings.Contains(tk.out.String(), EnvPrefix+"NVIDIA_VISIBLE_DEVICES=GPU-e2e\n") {
			t.Errorf("workload output lacks its NVIDIA_VISIBLE_DEVICES:\n%s", tk.out)
		}
		var spec struct {
			Process struct {
				Args []string `json:"args"`
				Env  []string `json:"env"`
			} `json:"process"`
		}
		b, err := os.ReadFile(filepath.Join(records, "gpu-workload.json"))
		if err != nil {
			t.Fatalf("no OCI spec recorded: %v", err)
		}
		if err := json.Unmarshal(b, &spec); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(spec.Process.Args, []string{"/workload"}) || !slices.Contains(spec.Process.Env, "NVIDIA_VISIBLE_DEVICES=GPU-e2e") {
			t.Errorf("recorded spec: process %+v", spec.Process)
		}
		calls := readCalls(t, filepath.Join(records, CallLog))
		var create, del bool
		for _, args := range calls {
			create = create || (slices.Contains(args, "create") && slices.Contains(args, "gpu-workload"))
			del = del || (slices.Contains(args, "delete") && slices.Contains(args, "gpu-workload"))
		}
		if !create || !del {
			t.Errorf("call log lacks the create or the passed-through delete of gpu-workload: %q", calls)
		}
	})

	t.Run("gpupolicy's agent installs the nvidia-ctk stand-in's CDI spec", func(t *testing.T) {
		if err := os.MkdirAll(filepath.Join(hostRoot, "run/nvidia/driver"), 0o755); err != nil {
			t.Fatal(err)
		}
		spec := agentCDISpec(t, hostRoot, toolkitDir)
		checkCDISpec(t, spec, config.ToolkitInstallDir+"/nvidia-cdi-hook")
	})
}

// agentCDISpec runs gpupolicy's toolkit installer (the agent's) on hostRoot, as the rendered
// stack does with toolkit.source container and CDI: nvidia-ctk is the copied one, chrooted.
// It returns the installed spec.
func agentCDISpec(t *testing.T, hostRoot, toolkitDir string) []byte {
	t.Helper()
	if toolkitDir != filepath.Join(hostRoot, config.ToolkitInstallDir) {
		t.Fatalf("toolkit installed at %s, not at %s in the host root", toolkitDir, config.ToolkitInstallDir)
	}
	dropIn := filepath.Join(t.TempDir(), config.DropInFile)
	if err := os.WriteFile(dropIn, []byte("version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia]\n  runtime_type = \"io.containerd.runc.v2\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	proc := t.TempDir()
	if err := os.WriteFile(filepath.Join(proc, "uptime"), []byte("1000.00 1000.00\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	in := &toolkit.Installer{HostRoot: hostRoot, DropInSource: dropIn, ContainerdVersion: "2.1", ContainerdBinary: toolkit.NoBinary,
		RestartMode: toolkit.RestartNone, ProcDir: proc, CDISpec: config.CDISpecFile,
		NvidiaCTK: config.ToolkitInstallDir + "/nvidia-ctk", CDIDriverRoot: "/run/nvidia/driver"}
	res, err := in.Install(context.Background())
	if err != nil || !res.CDISpecChanged {
		t.Fatalf("agent install: %+v %v", res, err)
	}
	b, err := os.ReadFile(filepath.Join(hostRoot, config.CDISpecFile))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkCDISpec checks a spec names the mock's GPUs by UUID plus "all", each setting
// CDIDeviceEnv, with the spec's hook at hookPath.
func checkCDISpec(t *testing.T, b []byte, hookPath string) {
	t.Helper()
	var spec struct {
		CDIVersion string `json:"cdiVersion"`
		Kind       string `json:"kind"`
		Devices    []struct {
			Name           string `json:"name"`
			ContainerEdits struct {
				Env []string `json:"env"`
			} `json:"containerEdits"`
		} `json:"devices"`
		ContainerEdits struct {
			Hooks []struct {
				HookName string   `json:"hookName"`
				Path     string   `json:"path"`
				Args     []string `json:"args"`
			} `json:"hooks"`
		} `json:"containerEdits"`
	}
	if err := yaml.UnmarshalStrict(b, &spec); err != nil {
		t.Fatalf("spec:\n%s\n%v", b, err)
	}
	uuids, err := MockGPUs()
	if err != nil {
		t.Fatal(err)
	}
	if spec.CDIVersion != "0.6.0" || spec.Kind != config.CDIKind {
		t.Errorf("cdiVersion %q kind %q", spec.CDIVersion, spec.Kind)
	}
	var names []string
	for i, d := range spec.Devices {
		names = append(names, d.Name)
		want := CDIDeviceEnv + "=" + strings.Join(uuids, ",")
		if i < len(uuids) {
			want = CDIDeviceEnv + "=" + uuids[i]
		}
		if !slices.Contains(d.ContainerEdits.Env, want) {
			t.Errorf("device %s: env %q lacks %s", d.Name, d.ContainerEdits.Env, want)
		}
	}
	if want := append(slices.Clone(uuids), "all"); !slices.Equal(names, want) {
		t.Errorf("devices %q, want the mock's %q", names, want)
	}
	if h := spec.ContainerEdits.Hooks; len(h) != 1 || h[0].HookName != "createContainer" || h[0].Path != hookPath {
		t.Errorf("hooks %+v, want one createContainer hook at %s", h, hookPath)
	}
}

func readCalls(t *testing.T, path string) [][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var calls [][]string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var args []string
		if err := json.Unmarshal([]byte(line), &args); err != nil {
			t.Fatalf("%s: line %q: %v", path, line, err)
		}
		calls = append(calls, args)
	}
	return calls
}
