package podresources_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/exporter/podresources"
	"github.com/gpupolicy/gpupolicy/plugin/exporter/podresources/podresourcestest"
)

func newClient(t *testing.T, socket string, maxStale time.Duration) *podresources.Client {
	t.Helper()
	c, err := podresources.New(podresources.Config{Socket: socket, Refresh: time.Hour, Timeout: 2 * time.Second, MaxStale: maxStale})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestMappingFromRealServer(t *testing.T) {
	srv := podresourcestest.Start(t,
		podresourcestest.Pod{Namespace: "ml", Name: "train-0", Containers: []podresourcestest.Container{
			{Name: "main", Resource: "nvidia.com/gpu", DeviceIDs: []string{"GPU-aaa", "GPU-bbb"}},
		}},
		// time-slicing: two replicas of one GPU in one container count once; another pod shares it
		podresourcestest.Pod{Namespace: "web", Name: "infer-1", Containers: []podresourcestest.Container{
			{Name: "server", Resource: "nvidia.com/gpu", DeviceIDs: []string{"GPU-ccc::0", "GPU-ccc::3"}},
		}},
		podresourcestest.Pod{Namespace: "web", Name: "infer-0", Containers: []podresourcestest.Container{
			{Name: "server", Resource: "nvidia.com/gpu", DeviceIDs: []string{"GPU-ccc::1"}},
		}},
		podresourcestest.Pod{Namespace: "ml", Name: "mig-pod", Containers: []podresourcestest.Container{
			{Name: "c", Resource: "nvidia.com/mig-1g.5gb", DeviceIDs: []string{"MIG-123"}},
		}},
	)
	c := newClient(t, srv.Socket, 0)
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := c.Mapping()
	want := map[string][]podresources.PodRef{
		"GPU-aaa": {{Namespace: "ml", Pod: "train-0", Container: "main"}},
		"GPU-bbb": {{Namespace: "ml", Pod: "train-0", Container: "main"}},
		"GPU-ccc": {{Namespace: "web", Pod: "infer-0", Container: "server"}, {Namespace: "web", Pod: "infer-1", Container: "server"}},
		"MIG-123": {{Namespace: "ml", Pod: "mig-pod", Container: "c"}},
	}
	if m.Len() != len(want) {
		t.Fatalf("mapping has %d devices, want %d", m.Len(), len(want))
	}
	for id, refs := range want {
		got := m.Lookup(id)
		if len(got) != len(refs) {
			t.Fatalf("%s: got %v, want %v", id, got, refs)
		}
		for i := range refs {
			if got[i] != refs[i] {
				t.Errorf("%s[%d]: got %v, want %v", id, i, got[i], refs[i])
			}
		}
	}
	gen := m.Gen
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c.Mapping().Gen != gen {
		t.Errorf("unchanged List answer changed the generation %d -> %d (consumers would rebuild for nothing)", gen, c.Mapping().Gen)
	}
	srv.SetPods()
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c.Mapping().Gen == gen || c.Mapping().Len() != 0 {
		t.Errorf("after pods left: gen %d (was %d), %d devices", c.Mapping().Gen, gen, c.Mapping().Len())
	}
	if st := c.Stats(); st.Requests != 3 || st.Successes != 3 || st.Errors != 0 || srv.Calls() != 3 {
		t.Errorf("stats %+v, server calls %d; want 3 requests, all answered", st, srv.Calls())
	}
}

func TestBrokenSocketGivesEmptyMapping(t *testing.T) {
	c := newClient(t, filepath.Join(t.TempDir(), "missing.sock"), 0)
	if err := c.Refresh(context.Background()); err == nil {
		t.Fatal("Refresh on a missing socket succeeded")
	}
	if c.Mapping() == nil || c.Mapping().Len() != 0 {
		t.Fatalf("mapping after a failed refresh: %+v", c.Mapping())
	}
	if st := c.Stats(); st.Errors != 1 || !st.LastSuccess.IsZero() {
		t.Errorf("stats %+v, want 1 error and no success", st)
	}
}

func TestStaleMappingDroppedAfterMaxStale(t *testing.T) {
	srv := podresourcestest.Start(t, podresourcestest.Pod{Namespace: "ns", Name: "p", Containers: []podresourcestest.Container{
		{Name: "c", Resource: "nvidia.com/gpu", DeviceIDs: []string{"GPU-aaa"}},
	}})
	const maxStale = 50 * time.Millisecond
	c := newClient(t, srv.Socket, maxStale)
	// The client's clock, not the machine's: how long a refresh takes does not move the test.
	var clock atomic.Int64
	podresources.SetClock(c, func() time.Time { return time.Unix(0, clock.Load()) })
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	clock.Store(int64(maxStale)) // exactly MaxStale old: still served
	if err := c.Refresh(context.Background()); err == nil {
		t.Fatal("Refresh after the kubelet stopped succeeded")
	}
	if c.Mapping().Len() != 1 {
		t.Fatal("a failed refresh at MaxStale dropped the mapping; it should be kept until it is older")
	}
	clock.Store(int64(maxStale + time.Nanosecond))
	_ = c.Refresh(context.Background())
	if c.Mapping().Len() != 0 {
		t.Fatal("mapping older than MaxStale still served after failed refreshes")
	}
}

func TestDeviceKey(t *testing.T) {
	for in, want := range map[string]string{"GPU-a::0": "GPU-a", "GPU-a": "GPU-a", "MIG-b::12": "MIG-b", "3": "3"} {
		if got := podresources.DeviceKey(in); got != want {
			t.Errorf("DeviceKey(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestReconnectsAfterKubeletRestart(t *testing.T) {
	srv := podresourcestest.Start(t, podresourcestest.Pod{Namespace: "ns", Name: "before", Containers: []podresourcestest.Container{
		{Name: "c", Resource: "nvidia.com/gpu", DeviceIDs: []string{"GPU-aaa"}}}})
	c := newClient(t, srv.Socket, time.Hour)
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if err := c.Refresh(context.Background()); err == nil {
		t.Fatal("Refresh while the kubelet is down succeeded")
	}
	srv.SetPods(podresourcestest.Pod{Namespace: "ns", Name: "after", Containers: []podresourcestest.Container{
		{Name: "c", Resource: "nvidia.com/gpu", DeviceIDs: []string{"GPU-aaa"}}}})
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.Refresh(context.Background())
		if err == nil && len(c.Mapping().Lookup("GPU-aaa")) == 1 && c.Mapping().Lookup("GPU-aaa")[0].Pod == "after" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reconnect after the kubelet restarted: %v, %v", err, c.Mapping().Lookup("GPU-aaa"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMappingFromDynamicResources: devices of DRA claims (driver gpu.nvidia.com) are attributed
// by the GPU's index, the MIG device's MIGKey and the UUID of a node CDI device; another
// driver's devices are not GPUs.
func TestMappingFromDynamicResources(t *testing.T) {
	srv := podresourcestest.Start(t,
		podresourcestest.Pod{Namespace: "ml", Name: "train", Containers: []podresourcestest.Container{{Name: "main", Claims: []podresourcestest.ClaimDevice{
			{Namespace: "ml", Claim: "gpu", Driver: "gpu.nvidia.com", Pool: "node-a", Device: "gpu-3",
				CDIDevices: []string{"k8s.gpu.nvidia.com/claim=uid-gpu-3", "nvidia.com/gpu=GPU-ddd"}},
		}}}},
		podresourcestest.Pod{Namespace: "ml", Name: "small", Containers: []podresourcestest.Container{{Name: "c", Claims: []podresourcestest.ClaimDevice{
			{Namespace: "ml", Claim: "mig", Driver: "gpu.nvidia.com", Pool: "node-a", Device: "gpu-5-mig-9-0"},
			{Namespace: "ml", Claim: "nic", Driver: "net.example.com", Pool: "node-a", Device: "gpu-7"},
		}}}},
	)
	c := newClient(t, srv.Socket, 0)
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := c.Mapping()
	train := podresources.PodRef{Namespace: "ml", Pod: "train", Container: "main"}
	small := podresources.PodRef{Namespace: "ml", Pod: "small", Container: "c"}
	for id, want := range map[string]podresources.PodRef{"3": train, "GPU-ddd": train, podresources.MIGKey(5, 9): small} {
		if got := m.Lookup(id); len(got) != 1 || got[0] != want {
			t.Errorf("%s: got %v, want %v", id, got, want)
		}
	}
	if m.Len() != 3 {
		t.Errorf("mapping has %d devices, want 3 (another driver's device is no GPU)", m.Len())
	}
}
