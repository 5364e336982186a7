package mps

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/mps/mpstest"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

// The test binary is also the stand-in for NVIDIA's nvidia-cuda-mps-control (mpstest).
func TestMain(m *testing.M) { os.Exit(mpstest.Run(m)) }

type fixture struct {
	root, bin string
	lib       *gpumock.Mock
	cfg       config.DevicePlugin
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	bin, err := mpstest.Link(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	lib, err := gpumock.New("dgxa100")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.DefaultDevicePlugin()
	cfg.Pool = "inference"
	cfg.Sharing.MPS = &config.MPS{Replicas: 4}
	return &fixture{root: t.TempDir(), bin: bin, lib: lib, cfg: cfg}
}

func (f *fixture) daemon(t *testing.T, shm string) *Daemon {
	t.Helper()
	d, err := New(Options{Lib: f.lib, Config: f.cfg, Root: f.root, ShmDir: shm, ControlBinary: f.bin,
		Interval: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// control asks the running stand-in, as an operator would with NVIDIA's program.
func (f *fixture) control(t *testing.T, command string) (string, error) {
	t.Helper()
	return Control{Binary: f.bin, PipeDir: config.MPSPipeDir(f.root, f.cfg.ResourceName), LogDir: config.MPSLogDir(f.root, f.cfg.ResourceName)}.Send(command)
}

func (f *fixture) status(t *testing.T) config.MPSStatus {
	t.Helper()
	st, err := config.ReadMPSStatus(f.root, os.ReadFile)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (f *fixture) computeModes(t *testing.T) []nvml.ComputeMode {
	t.Helper()
	n, _ := f.lib.DeviceGetCount()
	var out []nvml.ComputeMode
	for i := range n {
		d, _ := f.lib.DeviceGetHandleByIndex(i)
		m, ret := d.GetComputeMode()
		if ret != nvml.SUCCESS {
			t.Fatalf("GPU %d compute mode: %s", i, nvml.ErrorString(ret))
		}
		out = append(out, m)
	}
	return out
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second) // generous: a loaded machine (or -race) starts each control program slowly
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The daemon starts NVIDIA's control program with NVIDIA's limits, records that it serves the
// pool's config, restarts the control daemon when it dies, and on stop leaves the GPUs and
// the root as NVIDIA's daemon does.
func TestDaemonServesThePool(t *testing.T) {
	f := newFixture(t)
	d := f.daemon(t, "/dev/shm")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() { _, _ = f.control(t, "quit") })
	waitFor(t, "the record", func() bool { judged, _ := d.Ready(); return judged })

	st := f.status(t)
	if !st.Ready || st.Pool != "inference" || st.Resource != "nvidia.com/gpu" || st.Replicas != 4 || len(st.GPUs) != 8 {
		t.Fatalf("record: %+v", st)
	}
	// NVIDIA's activeThreadPercentage and perDevicePinnedDeviceMemoryLimits: 100/4, and
	// an A100 40GB's 40960 MiB / 4.
	if st.ActiveThreadPercentage != 25 || st.PinnedMemoryLimits["0"] != "10240M" || len(st.PinnedMemoryLimits) != 8 {
		t.Errorf("limits: %d%% %v", st.ActiveThreadPercentage, st.PinnedMemoryLimits)
	}
	if got, err := f.control(t, "get_default_active_thread_percentage"); err != nil || got != "25.0" {
		t.Errorf("the control daemon's active thread percentage: %q %v", got, err)
	}
	if got, err := f.control(t, "get_default_device_pinned_mem_limit 7"); err != nil || got != "10240M" {
		t.Errorf("the control daemon's pinned memory limit of GPU 7: %q %v", got, err)
	}
	for i, m := range f.computeModes(t) {
		if m != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
			t.Errorf("GPU %d compute mode %d, want EXCLUSIVE_PROCESS", i, m)
		}
	}
	if _, err := os.Stat(config.MPSStartedFile(f.root, "nvidia.com/gpu")); err != nil {
		t.Errorf("NVIDIA's .started marker: %v", err)
	}
	if err := config.MPSServes(f.root, f.cfg, os.ReadFile, os.Stat); err != nil {
		t.Errorf("MPSServes: %v", err)
	}
	other := f.cfg
	other.Sharing.MPS = &config.MPS{Replicas: 8}
	if err := config.MPSServes(f.root, other, os.ReadFile, os.Stat); err == nil || !strings.Contains(err.Error(), "has not applied this config yet") {
		t.Errorf("MPSServes of another replica count: %v", err)
	}

	// The control daemon dies: it is started again, with its limits, within an interval.
	if _, err := f.control(t, "quit"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the control daemon to be started again", func() bool {
		got, err := f.control(t, "get_default_active_thread_percentage")
		return err == nil && got == "25.0"
	})
	log, _ := os.ReadFile(filepath.Join(config.MPSLogDir(f.root, "nvidia.com/gpu"), "control.log"))
	if n := strings.Count(string(log), "Control daemon started"); n != 2 {
		t.Errorf("control.log shows %d starts, want 2:\n%s", n, log)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := f.control(t, "get_default_active_thread_percentage"); err == nil {
		t.Error("the control daemon still answers after stop")
	}
	for i, m := range f.computeModes(t) {
		if m != nvml.COMPUTEMODE_DEFAULT {
			t.Errorf("GPU %d compute mode %d after stop, want DEFAULT", i, m)
		}
	}
	if _, err := os.Stat(config.MPSStartedFile(f.root, "nvidia.com/gpu")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf(".started after stop: %v", err)
	}
	if st := f.status(t); st.Ready || !strings.Contains(st.Reason, "stopped") {
		t.Errorf("record after stop: %+v", st)
	}
	if err := config.MPSServes(f.root, f.cfg, os.ReadFile, os.Stat); err == nil {
		t.Error("MPSServes after stop")
	}
}

// A node the daemon cannot serve is recorded with the reason (the agent's gate shows it); the
// pod stays ready, and the node is judged again every interval.
func TestDaemonRecordsWhatTheNodeLacks(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(t *testing.T, f *fixture) (shm string)
		want string
	}{
		{"GPU in MIG mode", func(t *testing.T, f *fixture) string {
			if err := f.lib.ConfigureMIG(3, nvml.GPU_INSTANCE_PROFILE_7_SLICE); err != nil {
				t.Fatal(err)
			}
			return "/dev/shm"
		}, "GPU 3 (GPU-"},
		{"shm not a tmpfs", func(t *testing.T, f *fixture) string { return t.TempDir() }, "is not a tmpfs"},
		{"no control program", func(t *testing.T, f *fixture) string {
			f.bin = filepath.Join(t.TempDir(), mpstest.Name)
			return "/dev/shm"
		}, "is not in the container"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			shm := tc.edit(t, f)
			d := f.daemon(t, shm)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- d.Run(ctx) }()
			waitFor(t, "the record", func() bool { judged, _ := d.Ready(); return judged })
			st := f.status(t)
			if st.Ready || !strings.Contains(st.Reason, tc.want) {
				t.Errorf("record: %+v, want a reason with %q", st, tc.want)
			}
			err := config.MPSServes(f.root, f.cfg, os.ReadFile, os.Stat)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("MPSServes: %v", err)
			}
			if !d.Alive() {
				t.Error("not alive")
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("stop: %v", err)
			}
			for i, m := range f.computeModes(t) {
				if m != nvml.COMPUTEMODE_DEFAULT {
					t.Errorf("GPU %d compute mode %d, want DEFAULT", i, m)
				}
			}
		})
	}
}

// A config without sharing.mps is refused: the daemon runs only for MPS pools.
func TestDaemonRefusesAConfigWithoutMPS(t *testing.T) {
	_, err := New(Options{Config: config.DefaultDevicePlugin()})
	if err == nil || !strings.Contains(err.Error(), "does not share GPUs with MPS") {
		t.Fatalf("New: %v", err)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// A control daemon already serving the pipe (the GPU Operator's during a hand-over, same
// paths) is used, not started twice, and gets the pool's limits.
func TestDaemonUsesARunningControlDaemon(t *testing.T) {
	f := newFixture(t)
	ctl := Control{Binary: f.bin, PipeDir: config.MPSPipeDir(f.root, "nvidia.com/gpu"), LogDir: config.MPSLogDir(f.root, "nvidia.com/gpu")}
	if err := ctl.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ctl.Send("quit") })
	d := f.daemon(t, "/dev/shm")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	waitFor(t, "the record", func() bool { judged, _ := d.Ready(); return judged })
	if st := f.status(t); !st.Ready {
		t.Fatalf("record %+v", st)
	}
	if got, err := ctl.Send("get_default_active_thread_percentage"); err != nil || got != "25.0" {
		t.Errorf("the running daemon's active thread percentage %q %v, want the pool's 25.0", got, err)
	}
	log, _ := os.ReadFile(filepath.Join(ctl.LogDir, "control.log"))
	if n := strings.Count(string(log), "Control daemon started"); n != 1 {
		t.Errorf("control.log shows %d starts, want 1:\n%s", n, log)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
