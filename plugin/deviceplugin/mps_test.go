package deviceplugin_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/kubelettest"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/server"
)

// Under MPS the plugin registers only once the node's control daemon records that it serves
// this config, advertises replicas as under time-slicing, gives each container one replica
// with the daemon's pipe directory and /dev/shm (k8s-device-plugin v0.17.4's paths: its
// mps.Root PipeDir and ShmDir under --mps-root and /mps), and refuses a request for two.
func TestMPSReplicas(t *testing.T) {
	mpsDir := kubelettest.ShortDir(t)
	h, k := newHarness(t, setup{kubelet: true, mpsDir: mpsDir, cfg: func(c *config.DevicePlugin) {
		c.DeviceListStrategy = config.DeviceListEnvVar
		c.Sharing.MPS = &config.MPS{Replicas: 4}
	}})
	select {
	case r := <-k.Registrations:
		t.Fatalf("registered %s before the MPS control daemon serves the node", r.ResourceName)
	case <-time.After(300 * time.Millisecond):
	}
	// A record of another replica count is a daemon that has not applied this config.
	writeMPSStatus(t, mpsDir, config.MPSStatus{Ready: true, Resource: "nvidia.com/gpu", Replicas: 2})
	pipe := filepath.Join(mpsDir, "nvidia.com/gpu/pipe")
	if err := os.MkdirAll(pipe, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pipe, "control"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-k.Registrations:
		t.Fatalf("registered %s while the daemon serves 2 replicas, not 4", r.ResourceName)
	case <-time.After(300 * time.Millisecond):
	}
	writeMPSStatus(t, mpsDir, config.MPSStatus{Ready: true, Resource: "nvidia.com/gpu", Replicas: 4})
	waitRegistrations(t, k, 1)

	c := h.client(k, "nvidia.com/gpu")
	list := next(t, watch(t, c), "32 devices", func(l []*pluginapi.Device) bool { return len(l) == 32 })
	for i, d := range list {
		if want := h.uuids[i/4] + "::" + strconv.Itoa(i%4); d.ID != want {
			t.Fatalf("device %d id %s, want %s", i, d.ID, want)
		}
	}
	resp, err := c.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{h.uuids[2] + "::1"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.ContainerResponses[0]
	wantEnv := map[string]string{server.VisibleDevicesEnv: h.uuids[2], "CUDA_MPS_PIPE_DIRECTORY": "/mps/nvidia.com/gpu/pipe"}
	if len(r.Envs) != len(wantEnv) || r.Envs[server.VisibleDevicesEnv] != wantEnv[server.VisibleDevicesEnv] || r.Envs["CUDA_MPS_PIPE_DIRECTORY"] != wantEnv["CUDA_MPS_PIPE_DIRECTORY"] {
		t.Errorf("envs %v, want %v", r.Envs, wantEnv)
	}
	var mounts []string
	for _, m := range r.Mounts {
		mounts = append(mounts, m.HostPath+":"+m.ContainerPath+":"+strconv.FormatBool(m.ReadOnly))
	}
	if want := []string{"/run/nvidia/mps/nvidia.com/gpu/pipe:/mps/nvidia.com/gpu/pipe:false", "/run/nvidia/mps/shm:/dev/shm:false"}; !slices.Equal(mounts, want) {
		t.Errorf("mounts %v, want %v", mounts, want)
	}
	_, err = c.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{h.uuids[2] + "::1", h.uuids[3] + "::0"}},
	}})
	if err == nil || !strings.Contains(err.Error(), "a container may request 1, not 2") {
		t.Fatalf("two MPS replicas in one container: %v", err)
	}
}

func writeMPSStatus(t *testing.T, dir string, st config.MPSStatus) {
	t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, config.MPSStatusFileName+".tmp"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, config.MPSStatusFileName+".tmp"), config.MPSStatusFile(dir)); err != nil {
		t.Fatal(err)
	}
}
