package gpumock

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The device plugin, the exporter and nvidia-ctk run as separate processes on one node and
// must name the same GPUs the same way, as they do on real hardware.
func TestUUIDsAreStableAcrossMocks(t *testing.T) {
	uuids := func() []string {
		m, err := New("dgxa100")
		if err != nil {
			t.Fatal(err)
		}
		n, ret := m.DeviceGetCount()
		if ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		var out []string
		for i := range n {
			d, _ := m.DeviceGetHandleByIndex(i)
			u, ret := d.GetUUID()
			if ret != nvml.SUCCESS {
				t.Fatal(ret)
			}
			out = append(out, u)
		}
		return out
	}
	a, b := uuids(), uuids()
	seen := map[string]bool{}
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("GPU %d: UUID %s, then %s in a second mock", i, a[i], b[i])
		}
		if seen[a[i]] {
			t.Errorf("GPU %d: UUID %s repeats", i, a[i])
		}
		seen[a[i]] = true
	}
}
