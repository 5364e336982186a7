package deviceplugin_test

import (
	"testing"
	"time"
)

// The kubelet restarts 50 times; on every second restart it also wipes the plugin sockets, as
// a real kubelet does. Every new kubelet.sock must receive a registration.
func TestReRegistersAfterEachOfFiftyKubeletRestarts(t *testing.T) {
	h, k := newHarness(t, setup{kubelet: true})
	waitRegistrations(t, k, 1)
	var worst time.Duration
	extra := 0
	for i := range 50 {
		start := time.Now()
		if err := k.Restart(i%2 == 1); err != nil {
			t.Fatal(err)
		}
		gen := k.Generation()
		for {
			reg := waitRegistrations(t, k, 1)[0]
			if reg.ResourceName != "nvidia.com/gpu" {
				t.Fatalf("restart %d: registered %s", i, reg.ResourceName)
			}
			if reg.Generation == gen {
				break
			}
			extra++ // a late retry that reached the previous socket
		}
		if d := time.Since(start); d > worst {
			worst = d
		}
		// The kubelet can reach the plugin at the endpoint it registered.
		if i%10 == 9 {
			c := h.client(k, "nvidia.com/gpu")
			next(t, watch(t, c), "8 devices", func(l []*pluginDevice) bool { return len(l) == 8 })
		}
	}
	t.Logf("50 restarts: slowest re-registration %s, %d repeated registrations", worst, extra)
}

func TestGracefulShutdownRemovesSockets(t *testing.T) {
	h, k := newHarness(t, setup{kubelet: true})
	waitRegistrations(t, k, 1)
	lists := watch(t, h.client(k, "nvidia.com/gpu"))
	<-lists
	h.stop()
	if _, open := <-lists; open {
		// drain a possible in-flight list, then the stream must end
		for range lists {
		}
	}
	entries, _ := readDirNames(h.dir)
	for _, e := range entries {
		if e != "kubelet.sock" {
			t.Errorf("left behind %s", e)
		}
	}
}
