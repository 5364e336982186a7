package deviceplugin_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	nvmlserver "github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/kubelettest"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/server"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

var grpcWaitForReady = grpc.WaitForReady(true)

func ids(list []*pluginapi.Device) []string {
	out := make([]string, 0, len(list))
	for _, d := range list {
		out = append(out, d.ID)
	}
	return out
}

func TestRegistersAndListsEightGPUs(t *testing.T) {
	h, k := newHarness(t, setup{kubelet: true})
	reg := waitRegistrations(t, k, 1)[0]
	if reg.Version != pluginapi.Version || reg.ResourceName != "nvidia.com/gpu" || reg.Endpoint != "gpupolicy-nvidia.com-gpu.sock" {
		t.Fatalf("registration = %+v", reg)
	}
	if !reg.Options.GetPreferredAllocationAvailable || reg.Options.PreStartRequired {
		t.Fatalf("registration options = %+v", reg.Options)
	}
	c := h.client(k, reg.ResourceName)
	list := next(t, watch(t, c), "8 devices", func(l []*pluginapi.Device) bool { return len(l) == 8 })
	if got := ids(list); !slices.Equal(got, h.uuids) {
		t.Fatalf("ids = %v, want the GPU UUIDs %v", got, h.uuids)
	}
	for i, d := range list {
		if d.Health != pluginapi.Healthy {
			t.Errorf("%s health %s", d.ID, d.Health)
		}
		if d.Topology == nil || len(d.Topology.Nodes) != 1 || d.Topology.Nodes[0].ID != int64(i%2) {
			t.Errorf("GPU %d topology %v, want NUMA node %d from sysfs", i, d.Topology, i%2)
		}
	}
	opts, err := c.GetDevicePluginOptions(context.Background(), &pluginapi.Empty{})
	if err != nil || !opts.GetPreferredAllocationAvailable {
		t.Fatalf("GetDevicePluginOptions = %v, %v", opts, err)
	}
	if _, err := c.PreStartContainer(context.Background(), &pluginapi.PreStartContainerRequest{DevicesIds: h.uuids[:1]}); err != nil {
		t.Fatalf("PreStartContainer: %v", err)
	}
}

func TestRegistersWhenKubeletAppearsAfterStart(t *testing.T) {
	h, _ := newHarness(t, setup{})
	// Wait until the plugin serves, then let the kubelet come.
	sock := filepath.Join(h.dir, server.SocketName("nvidia.com/gpu"))
	for deadline := time.Now().Add(eventWait); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("plugin socket %s not created within %s", sock, eventWait)
		}
	}
	k := kubelettest.StartTest(t, h.dir)
	waitRegistrations(t, k, 1)
}

func TestReplicasAdvertiseThirtyTwoDevices(t *testing.T) {
	h, k := newHarness(t, setup{kubelet: true, cfg: func(c *config.DevicePlugin) { c.Sharing.TimeSlicing.Replicas = 4 }})
	waitRegistrations(t, k, 1)
	c := h.client(k, "nvidia.com/gpu")
	list := next(t, watch(t, c), "32 devices", func(l []*pluginapi.Device) bool { return len(l) == 32 })
	for i, d := range list {
		want := h.uuids[i/4] + "::" + string(rune('0'+i%4))
		if d.ID != want {
			t.Fatalf("device %d id %s, want %s", i, d.ID, want)
		}
	}
	// Four replicas of two GPUs go into one container as the two GPUs.
	resp, err := c.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{h.uuids[1] + "::0", h.uuids[1] + "::3", h.uuids[2] + "::1"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := cdiNames(resp.ContainerResponses[0]); !slices.Equal(got, []string{"nvidia.com/gpu=" + h.uuids[1], "nvidia.com/gpu=" + h.uuids[2]}) {
		t.Fatalf("CDI devices %v", got)
	}
	// A preferred allocation of 3 replicas spreads over 3 GPUs, least shared first.
	avail := ids(list)[:10] // GPU0 x4, GPU1 x4, GPU2 x2
	pref := preferred(t, c, avail, nil, 3)
	if got := uniqueGPUs(pref); len(got) != 3 {
		t.Fatalf("preferred %v uses GPUs %v, want 3 distinct GPUs", pref, got)
	}
}

func uniqueGPUs(idList []string) []string {
	var out []string
	for _, id := range idList {
		u, _, _ := strings.Cut(id, "::")
		if !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out
}

func cdiNames(r *pluginapi.ContainerAllocateResponse) []string {
	var out []string
	for _, d := range r.CdiDevices {
		out = append(out, d.Name)
	}
	return out
}

func TestAllocate(t *testing.T) {
	for _, tc := range []struct {
		strategy string
		check    func(t *testing.T, uuids []string, r *pluginapi.ContainerAllocateResponse)
	}{
		{config.DeviceListCDICRI, func(t *testing.T, uuids []string, r *pluginapi.ContainerAllocateResponse) {
			want := []string{"nvidia.com/gpu=" + uuids[3], "nvidia.com/gpu=" + uuids[5]}
			if got := cdiNames(r); !slices.Equal(got, want) {
				t.Errorf("CDI devices %v, want %v", got, want)
			}
			if r.Envs[server.VisibleDevicesEnv] != "void" {
				t.Errorf("env %v: cdi-cri must keep the legacy hook from injecting all GPUs", r.Envs)
			}
		}},
		{config.DeviceListEnvVar, func(t *testing.T, uuids []string, r *pluginapi.ContainerAllocateResponse) {
			if got, want := r.Envs[server.VisibleDevicesEnv], uuids[3]+","+uuids[5]; got != want {
				t.Errorf("NVIDIA_VISIBLE_DEVICES=%q, want %q", got, want)
			}
			if len(r.CdiDevices) != 0 {
				t.Errorf("envvar strategy returned CDI devices %v", r.CdiDevices)
			}
		}},
	} {
		t.Run(tc.strategy, func(t *testing.T) {
			h, k := newHarness(t, setup{kubelet: true, cfg: func(c *config.DevicePlugin) { c.DeviceListStrategy = tc.strategy }})
			waitRegistrations(t, k, 1)
			c := h.client(k, "nvidia.com/gpu")
			resp, err := c.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
				{DevicesIds: []string{h.uuids[3], h.uuids[5]}},
			}}, grpcWaitForReady)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, h.uuids, resp.ContainerResponses[0])
			_, err = c.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
				{DevicesIds: []string{"GPU-not-here"}},
			}})
			if err == nil || !strings.Contains(err.Error(), `no device "GPU-not-here"`) {
				t.Fatalf("unknown device: err = %v", err)
			}
		})
	}
}

func preferred(t testing.TB, c pluginapi.DevicePluginClient, avail, must []string, size int) []string {
	t.Helper()
	resp, err := c.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: avail, MustIncludeDeviceIDs: must, AllocationSize: int32(size)}},
	}, grpcWaitForReady)
	if err != nil {
		t.Fatal(err)
	}
	return resp.ContainerResponses[0].DeviceIDs
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

func TestPreferredAllocationDGXA100(t *testing.T) {
	h, k := newHarness(t, setup{kubelet: true})
	waitRegistrations(t, k, 1)
	c := h.client(k, "nvidia.com/gpu")
	u := h.uuids
	// All pairs have 12 NVLinks through the NVSwitches; the pair under one PCIe switch wins.
	if got := preferred(t, c, []string{u[5], u[2], u[3], u[0]}, nil, 2); !slices.Equal(sorted(got), sorted([]string{u[2], u[3]})) {
		t.Errorf("preferred %v, want GPUs 2,3", got)
	}
	// must-include GPU 6 gets its PCIe partner 7.
	if got := preferred(t, c, u, []string{u[6]}, 2); !slices.Equal(got, []string{u[6], u[7]}) {
		t.Errorf("preferred %v, want GPUs 6,7", got)
	}
	// Four GPUs: one NUMA node's worth.
	if got := preferred(t, c, u, nil, 4); !slices.Equal(sorted(got), sorted(u[:4])) {
		t.Errorf("preferred %v, want GPUs 0-3", got)
	}
}

// hybridCubeMesh is a DGX-1-like topology without NVSwitch: NVLinks only between some pairs.
func hybridCubeMesh(m *gpumock.Mock) error {
	t := gpumock.DGXA100Topology(8)
	pairs := map[[2]int]int{{0, 1}: 1, {0, 2}: 1, {0, 3}: 2, {0, 4}: 2, {1, 2}: 2, {1, 3}: 1, {1, 5}: 2, {2, 3}: 1, {2, 6}: 1,
		{3, 7}: 1, {4, 5}: 1, {4, 6}: 1, {4, 7}: 2, {5, 6}: 2, {5, 7}: 1, {6, 7}: 1}
	t.Links = make([][]gpumock.Link, 8)
	for p, n := range pairs {
		for range n {
			t.Links[p[0]] = append(t.Links[p[0]], gpumock.Link{GPU: p[1], Switch: -1})
			t.Links[p[1]] = append(t.Links[p[1]], gpumock.Link{GPU: p[0], Switch: -1})
		}
	}
	return m.SetTopology(t)
}

func TestPreferredAllocationPrefersNVLinkPairs(t *testing.T) {
	h, k := newHarness(t, setup{kubelet: true, mock: hybridCubeMesh})
	waitRegistrations(t, k, 1)
	c := h.client(k, "nvidia.com/gpu")
	u := h.uuids
	// GPU 0 and 4 share two NVLinks but sit on different NUMA nodes; 0 and 1 share a PCIe
	// switch and one NVLink; 0 and 5 share nothing. NVLink count wins.
	if got := preferred(t, c, []string{u[0], u[1], u[4], u[5]}, []string{u[0]}, 2); !slices.Equal(got, []string{u[0], u[4]}) {
		t.Errorf("preferred %v, want GPUs 0,4 (two NVLinks)", got)
	}
	if got := preferred(t, c, []string{u[0], u[5], u[6], u[7]}, nil, 2); !slices.Equal(sorted(got), sorted([]string{u[5], u[6]})) {
		t.Errorf("preferred %v, want GPUs 5,6 (two NVLinks)", got)
	}
}

func TestPreferredAllocationSkipsUnhealthy(t *testing.T) {
	h, k := newHarness(t, setup{kubelet: true, cfg: func(c *config.DevicePlugin) { c.HealthChecks.RecoveryPeriod = "1h" }})
	waitRegistrations(t, k, 1)
	c := h.client(k, "nvidia.com/gpu")
	lists := watch(t, c)
	u := h.uuids
	if err := h.mock.SetLost(1, true); err != nil {
		t.Fatal(err)
	}
	next(t, lists, "GPU 1 unhealthy", func(l []*pluginapi.Device) bool { return healthOf(l, u[1]) == pluginapi.Unhealthy })
	// The kubelet may still list it (or an id it never heard of): both are skipped, not errors.
	got := preferred(t, c, []string{u[0], u[1], u[2], u[3], "GPU-gone"}, nil, 2)
	if !slices.Equal(sorted(got), sorted([]string{u[2], u[3]})) {
		t.Errorf("preferred %v, want GPUs 2,3 (GPU 1 lost, so 0 has no PCIe partner)", got)
	}
	// A must-include id the plugin does not know is kept and counts against the size.
	if got := preferred(t, c, []string{u[2], u[3]}, []string{"GPU-gone"}, 2); !slices.Equal(got, []string{"GPU-gone", u[2]}) {
		t.Errorf("preferred %v, want GPU-gone plus one GPU", got)
	}
	if got := preferred(t, c, []string{u[1], "GPU-gone"}, nil, 1); len(got) != 0 {
		t.Errorf("preferred %v from only unusable devices, want none", got)
	}
}

func TestMIGMixed(t *testing.T) {
	h, k := newHarness(t, setup{kubelet: true, cfg: func(c *config.DevicePlugin) { c.MIGStrategy = "mixed" },
		mock: func(m *gpumock.Mock) error {
			one := nvml.GPU_INSTANCE_PROFILE_1_SLICE
			if err := m.ConfigureMIG(0, one, one, one, one, one, one, one); err != nil {
				return err
			}
			return m.ConfigureMIG(1, nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_3_SLICE)
		}})
	regs := waitRegistrations(t, k, 3)
	var names []string
	for _, r := range regs {
		names = append(names, r.ResourceName)
	}
	want := []string{"nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "nvidia.com/mig-3g.20gb"}
	if !slices.Equal(sorted(names), want) {
		t.Fatalf("registered %v, want %v", names, want)
	}
	counts := map[string]int{"nvidia.com/gpu": 6, "nvidia.com/mig-1g.5gb": 7, "nvidia.com/mig-3g.20gb": 2}
	for res, n := range counts {
		c := h.client(k, res)
		list := next(t, watch(t, c), res, func(l []*pluginapi.Device) bool { return len(l) == n })
		for _, d := range list {
			if strings.HasPrefix(res, "nvidia.com/mig-") != strings.HasPrefix(d.ID, "MIG-") {
				t.Errorf("%s advertises %s", res, d.ID)
			}
		}
		if res == "nvidia.com/mig-1g.5gb" {
			// MIG devices have no pair topology: the first usable ones in device order.
			if got := preferred(t, c, []string{list[4].ID, list[2].ID, list[6].ID}, nil, 2); !slices.Equal(got, []string{list[2].ID, list[4].ID}) {
				t.Errorf("MIG preferred %v", got)
			}
		}
		if res == "nvidia.com/mig-3g.20gb" {
			resp, err := c.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{list[1].ID}}}})
			if err != nil || cdiNames(resp.ContainerResponses[0])[0] != "nvidia.com/gpu="+list[1].ID {
				t.Errorf("MIG allocate = %v, %v", resp, err)
			}
		}
	}
}

func TestMIGSingle(t *testing.T) {
	three := nvml.GPU_INSTANCE_PROFILE_3_SLICE
	h, k := newHarness(t, setup{kubelet: true, cfg: func(c *config.DevicePlugin) { c.MIGStrategy = "single" },
		mock: func(m *gpumock.Mock) error {
			for i := range 8 {
				if err := m.ConfigureMIG(i, three, three); err != nil {
					return err
				}
			}
			return nil
		}})
	reg := waitRegistrations(t, k, 1)[0]
	if reg.ResourceName != "nvidia.com/gpu" {
		t.Fatalf("registered %s", reg.ResourceName)
	}
	list := next(t, watch(t, h.client(k, reg.ResourceName)), "16 MIG devices", func(l []*pluginapi.Device) bool { return len(l) == 16 })
	for _, d := range list {
		if !strings.HasPrefix(d.ID, "MIG-") {
			t.Errorf("single strategy advertises %s", d.ID)
		}
	}
}

// A GPU that cannot be identified at start (fallen off the bus) is left out; the others are
// advertised and allocated around the gap, and a GPU whose MIG query fails is still served.
func TestBrokenGPUAtStartDoesNotStopTheNode(t *testing.T) {
	h, k := newHarness(t, setup{kubelet: true, mock: func(m *gpumock.Mock) error {
		m.Devices[3].(*nvmlserver.Device).GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
		m.Devices[5].(*nvmlserver.Device).GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_UNKNOWN }
		return nil
	}})
	waitRegistrations(t, k, 1)
	c := h.client(k, "nvidia.com/gpu")
	u := h.uuids
	list := next(t, watch(t, c), "7 devices", func(l []*pluginapi.Device) bool { return len(l) == 7 })
	if want := slices.Delete(slices.Clone(u), 3, 4); !slices.Equal(ids(list), want) {
		t.Fatalf("advertised %v, want %v", ids(list), want)
	}
	if got := preferred(t, c, []string{u[2], u[4], u[5]}, []string{u[2]}, 2); !slices.Equal(got, []string{u[2], u[4]}) && !slices.Equal(got, []string{u[2], u[5]}) {
		t.Errorf("preferred %v", got)
	}
	if got := preferred(t, c, []string{u[0], u[1], u[2], u[4], u[5]}, nil, 3); !slices.Equal(sorted(got), sorted([]string{u[0], u[1], u[2]})) {
		t.Errorf("preferred %v, want GPUs 0,1,2 (one NUMA node, 3 gone)", got)
	}
}
