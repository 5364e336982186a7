package deviceplugin_test

import (
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

func healthyExcept(l []*pluginapi.Device, bad ...string) bool {
	for _, d := range l {
		want := pluginapi.Healthy
		for _, b := range bad {
			if d.ID == b {
				want = pluginapi.Unhealthy
			}
		}
		if d.Health != want {
			return false
		}
	}
	return true
}

func TestInjectedXIDMarksDeviceUnhealthyThenRecovers(t *testing.T) {
	h, k := newHarness(t, setup{kubelet: true})
	waitRegistrations(t, k, 1)
	lists := watch(t, h.client(k, "nvidia.com/gpu"))
	next(t, lists, "all healthy", func(l []*pluginapi.Device) bool { return len(l) == 8 && healthyExcept(l) })

	// An ignored XID (13: a graphics engine exception raised by the application) changes nothing;
	// the critical XID 79 (fallen off the bus) that follows is the next update.
	if n, err := h.mock.InjectXID(3, 13); err != nil || n != 1 {
		t.Fatalf("inject: %d sets, %v", n, err)
	}
	start := time.Now()
	if _, err := h.mock.InjectXID(5, 79); err != nil {
		t.Fatal(err)
	}
	l := next(t, lists, "an update", func([]*pluginapi.Device) bool { return true })
	if !healthyExcept(l, h.uuids[5]) {
		t.Fatalf("after XID 79 on GPU 5: %v", l)
	}
	t.Logf("XID -> Unhealthy on the stream: %s", time.Since(start))
	// Recovery: 300ms without a bad signal, probes succeeding.
	next(t, lists, "GPU 5 healthy again", func(l []*pluginapi.Device) bool { return healthyExcept(l) })
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("recovered after %s, before the 300ms recovery period", d)
	}
}

func TestLostGPUStaysUnhealthyUntilItAnswers(t *testing.T) {
	h, k := newHarness(t, setup{kubelet: true})
	waitRegistrations(t, k, 1)
	lists := watch(t, h.client(k, "nvidia.com/gpu"))
	if err := h.mock.SetLost(2, true); err != nil {
		t.Fatal(err)
	}
	next(t, lists, "GPU 2 unhealthy", func(l []*pluginapi.Device) bool { return healthyExcept(l, h.uuids[2]) })
	// Three recovery periods later it is still unhealthy: every probe refreshes the bad signal.
	select {
	case l := <-lists:
		t.Fatalf("update while GPU 2 is still lost: %v", l)
	case <-time.After(900 * time.Millisecond):
	}
	if err := h.mock.SetLost(2, false); err != nil {
		t.Fatal(err)
	}
	// That it waits for the recovery period after the last failed probe is exact in the health
	// package's TestRecoveryWaitsForThePeriod (on a test clock; wall time here depends on load).
	next(t, lists, "GPU 2 healthy", func(l []*pluginapi.Device) bool { return healthyExcept(l) })
}

func TestDoubleBitECCMarksUnhealthy(t *testing.T) {
	h, k := newHarness(t, setup{kubelet: true, cfg: func(c *config.DevicePlugin) { c.HealthChecks.RecoveryPeriod = "1h" }})
	waitRegistrations(t, k, 1)
	lists := watch(t, h.client(k, "nvidia.com/gpu"))
	if err := h.mock.AddDoubleBitErrors(7, 2); err != nil {
		t.Fatal(err)
	}
	next(t, lists, "GPU 7 unhealthy", func(l []*pluginapi.Device) bool { return healthyExcept(l, h.uuids[7]) })
}

// A GPU whose driver counted uncorrected ECC errors before the plugin started is Unhealthy in
// the first list the kubelet gets: it never offers that GPU to a pod.
func TestECCErrorsBeforeStartAreInTheFirstList(t *testing.T) {
	h, k := newHarness(t, setup{kubelet: true, cfg: func(c *config.DevicePlugin) { c.HealthChecks.RecoveryPeriod = "1h" },
		mock: func(m *gpumock.Mock) error { return m.AddDoubleBitErrors(4, 1) }})
	waitRegistrations(t, k, 1)
	first := next(t, watch(t, h.client(k, "nvidia.com/gpu")), "the first list", func([]*pluginapi.Device) bool { return true })
	if len(first) != 8 || !healthyExcept(first, h.uuids[4]) {
		t.Fatalf("first list %v, want 8 devices with only GPU 4 unhealthy", first)
	}
}

func TestHealthChecksDisabledIgnoresXIDs(t *testing.T) {
	h, k := newHarness(t, setup{kubelet: true, cfg: func(c *config.DevicePlugin) { c.HealthChecks.Enabled = false }})
	waitRegistrations(t, k, 1)
	lists := watch(t, h.client(k, "nvidia.com/gpu"))
	<-lists
	if n, _ := h.mock.InjectXID(0, 79); n != 0 {
		t.Fatalf("%d event sets registered with health checks disabled", n)
	}
}

func TestMIGXIDMarksOnlyThatInstance(t *testing.T) {
	one := nvml.GPU_INSTANCE_PROFILE_1_SLICE
	h, k := newHarness(t, setup{kubelet: true, cfg: func(c *config.DevicePlugin) { c.MIGStrategy = "mixed" },
		mock: func(m *gpumock.Mock) error { return m.ConfigureMIG(0, one, one, one) }})
	waitRegistrations(t, k, 2)
	lists := watch(t, h.client(k, "nvidia.com/mig-1g.5gb"))
	first := next(t, lists, "3 MIG devices", func(l []*pluginapi.Device) bool { return len(l) == 3 })
	// GPU instance 1 (the second MIG device) reports XID 94 (contained ECC error).
	if _, err := h.mock.InjectEvent(0, nvml.EventTypeXidCriticalError, 94, 1, 0); err != nil {
		t.Fatal(err)
	}
	next(t, lists, "MIG device 1 unhealthy", func(l []*pluginapi.Device) bool { return healthyExcept(l, first[1].ID) })
	next(t, lists, "MIG device 1 recovered", func(l []*pluginapi.Device) bool { return healthyExcept(l) })
	// A whole-GPU XID takes every MIG device of that GPU down.
	if _, err := h.mock.InjectXID(0, 48); err != nil {
		t.Fatal(err)
	}
	next(t, lists, "all MIG devices unhealthy", func(l []*pluginapi.Device) bool {
		return healthyExcept(l, first[0].ID, first[1].ID, first[2].ID)
	})
}
