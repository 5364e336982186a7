package deviceplugin_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/kubelettest"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/server"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

// harness runs a Manager on the dgxa100 mock in a short temp dir (unix socket paths must stay
// under 108 bytes, which t.TempDir's long names can exceed).
type harness struct {
	t     testing.TB
	dir   string
	root  string
	mock  *gpumock.Mock
	mgr   *deviceplugin.Manager
	uuids []string
	stop  func()
	done  chan error
}

type setup struct {
	cfg  func(*config.DevicePlugin)
	mock func(*gpumock.Mock) error
	// mockOpts open the node's mock with options, e.g. the MIG state another program wrote.
	mockOpts []gpumock.Option
	kubelet  bool          // start the test kubelet before the plugin
	probe    time.Duration // health probe interval; 20ms when zero
	// productionRetry keeps the registration retry defaults instead of the tests' fast ones.
	productionRetry bool
	// mpsDir is where the MPS control daemon's record is read (sharing.mps).
	mpsDir string
}

func newHarness(t testing.TB, s setup) (*harness, *kubelettest.Kubelet) {
	t.Helper()
	h := &harness{t: t, dir: kubelettest.ShortDir(t), root: kubelettest.ShortDir(t), done: make(chan error, 1)}
	m, err := gpumock.New("dgxa100", s.mockOpts...)
	if err != nil {
		t.Fatal(err)
	}
	h.mock = m
	for i, d := range m.Devices {
		u, _ := d.GetUUID()
		h.uuids = append(h.uuids, u)
		// sysfs says GPU i is on NUMA node i%2 (NVML's mock says i/4): the plugin must trust sysfs.
		bus := filepath.Join(h.root, "sys/bus/pci/devices", fmt.Sprintf("0000:%02x:00.0", i))
		if err := os.MkdirAll(bus, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bus, "numa_node"), fmt.Appendf(nil, "%d\n", i%2), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if s.mock != nil {
		if err := s.mock(m); err != nil {
			t.Fatal(err)
		}
	}
	cfg := config.DefaultDevicePlugin()
	cfg.HealthChecks.RecoveryPeriod = "300ms"
	if s.cfg != nil {
		s.cfg(&cfg)
	}
	if s.probe == 0 {
		s.probe = 20 * time.Millisecond
	}
	var k *kubelettest.Kubelet
	if s.kubelet {
		if k, err = kubelettest.Start(h.dir); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(k.Stop)
	}
	opts := deviceplugin.Options{
		Lib: m, Config: cfg, PluginDir: h.dir, HostRoot: h.root,
		Logger:        testLogger(),
		ProbeInterval: s.probe, WaitTimeout: 50 * time.Millisecond,
		RetryInitial: 2 * time.Millisecond, RetryMax: 50 * time.Millisecond, RetryAttempts: 50,
		MPSDir: s.mpsDir, MPSPoll: 10 * time.Millisecond,
	}
	if s.productionRetry {
		opts.RetryInitial, opts.RetryMax, opts.RetryAttempts = 0, 0, 0
	}
	h.mgr, err = deviceplugin.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { h.done <- h.mgr.Run(ctx) }()
	h.stop = func() {
		cancel()
		select {
		case err := <-h.done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Run did not return within 5s of cancel")
		}
		h.stop = func() {}
	}
	t.Cleanup(func() { h.stop() })
	return h, k
}

// eventWait bounds every wait for an event the plugin must cause. It is no estimate of how long
// the event takes: a test never passes by waiting less, so the bound is generous enough for a
// machine whose cores are all busy, and a test fails on it only when the event never comes.
const eventWait = 30 * time.Second

// waitRegistrations collects n registrations or fails after eventWait.
func waitRegistrations(t testing.TB, k *kubelettest.Kubelet, n int) []kubelettest.Registration {
	t.Helper()
	var got []kubelettest.Registration
	timeout := eventWait
	deadline := time.After(timeout)
	for len(got) < n {
		select {
		case r := <-k.Registrations:
			got = append(got, r)
		case <-deadline:
			t.Fatalf("got %d registrations within %s, want %d", len(got), timeout, n)
		}
	}
	return got
}

// client dials the plugin of resource, waiting until its socket exists.
func (h *harness) client(k *kubelettest.Kubelet, resource string) pluginapi.DevicePluginClient {
	h.t.Helper()
	c, closeConn, err := k.Dial(server.SocketName(resource))
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = closeConn() })
	return c
}

// watch opens ListAndWatch and forwards every list it receives.
func watch(t testing.TB, c pluginapi.DevicePluginClient) <-chan []*pluginapi.Device {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := c.ListAndWatch(ctx, &pluginapi.Empty{}, grpcWaitForReady)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan []*pluginapi.Device, 256)
	go func() {
		defer close(out)
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			out <- resp.Devices
		}
	}()
	return out
}

// next waits for the next list that satisfies ok, failing after eventWait.
func next(t testing.TB, lists <-chan []*pluginapi.Device, what string, ok func([]*pluginapi.Device) bool) []*pluginapi.Device {
	t.Helper()
	timeout := eventWait
	deadline := time.After(timeout)
	for {
		select {
		case l, open := <-lists:
			if !open {
				t.Fatalf("ListAndWatch ended while waiting for %s", what)
			}
			if ok(l) {
				return l
			}
		case <-deadline:
			t.Fatalf("no ListAndWatch update with %s within %s", what, timeout)
		}
	}
}

func healthOf(list []*pluginapi.Device, id string) string {
	for _, d := range list {
		if d.ID == id {
			return d.Health
		}
	}
	return "absent"
}

type pluginDevice = pluginapi.Device

func readDirNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, err
}

// testLogger discards logs unless DP_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("DP_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}
