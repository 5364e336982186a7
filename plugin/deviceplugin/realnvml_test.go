package deviceplugin_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/kubelettest"
)

// TestRealNVML runs the built gpu-device-plugin binary against the host's real NVML: a test
// kubelet receives its registration and a real gRPC client lists, allocates and asks for a
// preferred allocation. It runs only on a GPU machine (GPUPOLICY_REAL_NVML=1, binary in
// GPU_DEVICE_PLUGIN_BIN) and writes what the plugin advertised to GPUPOLICY_REAL_NVML_OUT.
func TestRealNVML(t *testing.T) {
	bin := os.Getenv("GPU_DEVICE_PLUGIN_BIN")
	if os.Getenv("GPUPOLICY_REAL_NVML") != "1" || bin == "" {
		t.Skip("needs a GPU: set GPUPOLICY_REAL_NVML=1 and GPU_DEVICE_PLUGIN_BIN")
	}
	dir := kubelettest.ShortDir(t)
	k, err := kubelettest.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	for _, strategy := range []string{"cdi-cri", "envvar"} {
		t.Run(strategy, func(t *testing.T) {
			cfg := filepath.Join(dir, strategy+".yaml")
			doc := "resourceName: nvidia.com/gpu\nmigStrategy: none\ndeviceListStrategy: " + strategy +
				"\nsharing: {timeSlicing: {replicas: 1}}\nhealthChecks: {enabled: true, ignoredXIDs: [13, 31, 43, 45, 68, 109]}\n"
			if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cmd := exec.CommandContext(ctx, bin, "--plugin-dir", dir, "--config", cfg, "--host-root", "/")
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			start := time.Now()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cancel(); _ = cmd.Wait() }()

			var reg kubelettest.Registration
			select {
			case reg = <-k.Registrations:
			case <-time.After(30 * time.Second):
				t.Fatal("no registration within 30s")
			}
			registered := time.Since(start)
			c, closeConn, err := k.Dial(reg.Endpoint)
			if err != nil {
				t.Fatal(err)
			}
			defer closeConn()
			stream, err := c.ListAndWatch(context.Background(), &pluginapi.Empty{})
			if err != nil {
				t.Fatal(err)
			}
			list, err := stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Devices) == 0 {
				t.Fatal("the plugin advertised no devices on a GPU machine")
			}
			var ids []string
			for _, d := range list.Devices {
				ids = append(ids, d.ID)
			}
			pref, err := c.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{
				ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: ids, AllocationSize: 1}}})
			if err != nil {
				t.Fatal(err)
			}
			alloc, err := c.Allocate(context.Background(), &pluginapi.AllocateRequest{
				ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: pref.ContainerResponses[0].DeviceIDs}}})
			if err != nil {
				t.Fatal(err)
			}
			record := map[string]any{
				"strategy": strategy, "registration": reg.RegisterRequest, "registeredAfter": registered.String(),
				"devices": list.Devices, "preferred": pref.ContainerResponses, "allocate": alloc.ContainerResponses,
			}
			out, _ := json.MarshalIndent(record, "", "  ")
			t.Logf("%s", out)
			if path := os.Getenv("GPUPOLICY_REAL_NVML_OUT"); path != "" {
				f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
				if err == nil {
					_, _ = f.Write(append(out, '\n'))
					_ = f.Close()
				}
			}
		})
	}
}
