package deviceplugin_test

import (
	"context"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// BenchmarkAllocate is one kubelet Allocate call over gRPC (unix socket) for 1 and 8 GPUs.
func BenchmarkAllocate(b *testing.B) {
	for _, n := range []int{1, 8} {
		b.Run(map[int]string{1: "1gpu", 8: "8gpu"}[n], func(b *testing.B) {
			h, k := newHarness(b, setup{kubelet: true})
			waitRegistrations(b, k, 1)
			c := h.client(k, "nvidia.com/gpu")
			req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: h.uuids[:n]}}}
			if _, err := c.Allocate(context.Background(), req, grpcWaitForReady); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := c.Allocate(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkXIDToListAndWatch is the time from an XID event in NVML to the ListAndWatch update
// that shows the device Unhealthy at the kubelet's end of the stream. Devices recover after
// 10ms (untimed) so the loop can hit them again; the stream sends the latest state, so a
// recovery period shorter than one send could hide the Unhealthy state this measures.
func BenchmarkXIDToListAndWatch(b *testing.B) {
	h, k := newHarness(b, setup{kubelet: true, probe: time.Millisecond,
		cfg: func(c *config.DevicePlugin) { c.HealthChecks.RecoveryPeriod = "10ms" }})
	waitRegistrations(b, k, 1)
	lists := watch(b, h.client(k, "nvidia.com/gpu"))
	last := next(b, lists, "8 devices", func(l []*pluginapi.Device) bool { return len(l) == 8 })
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		gpu := i % 8
		i++
		if healthOf(last, h.uuids[gpu]) != pluginapi.Healthy {
			b.StopTimer()
			next(b, lists, "healthy", func(l []*pluginapi.Device) bool { return healthOf(l, h.uuids[gpu]) == pluginapi.Healthy })
			b.StartTimer()
		}
		if _, err := h.mock.InjectXID(gpu, 79); err != nil {
			b.Fatal(err)
		}
		last = next(b, lists, "unhealthy", func(l []*pluginapi.Device) bool { return healthOf(l, h.uuids[gpu]) == pluginapi.Unhealthy })
	}
}

// BenchmarkKubeletSocketToRegistration is the time from a (re)created kubelet.sock to the
// plugin's registration arriving on it (target < 1s).
func BenchmarkKubeletSocketToRegistration(b *testing.B) {
	_, k := newHarness(b, setup{kubelet: true, productionRetry: true})
	waitRegistrations(b, k, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := k.Restart(false); err != nil {
			b.Fatal(err)
		}
		gen := k.Generation()
		for {
			if r := waitRegistrations(b, k, 1)[0]; r.Generation == gen {
				break
			}
		}
	}
}
