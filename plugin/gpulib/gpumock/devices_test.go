package gpumock

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestMockDevicesAnswerLikeADGXA100(t *testing.T) {
	m, err := New("dgxa100")
	if err != nil {
		t.Fatal(err)
	}
	d0, _ := m.DeviceGetHandleByIndex(0)
	d1, _ := m.DeviceGetHandleByIndex(1)
	d4, _ := m.DeviceGetHandleByIndex(4)
	if lvl, _ := d0.GetTopologyCommonAncestor(d1); lvl != nvml.TOPOLOGY_MULTIPLE {
		t.Errorf("0-1 %v", lvl)
	}
	if lvl, _ := d0.GetTopologyCommonAncestor(d4); lvl != nvml.TOPOLOGY_SYSTEM {
		t.Errorf("0-4 %v", lvl)
	}
	if st, ret := d0.GetNvLinkState(11); st != nvml.FEATURE_ENABLED || ret != nvml.SUCCESS {
		t.Errorf("link 11: %v %v", st, ret)
	}
	if _, ret := d0.GetNvLinkState(12); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("link 12: %v", ret)
	}
	if typ, _ := d0.GetNvLinkRemoteDeviceType(0); typ != nvml.NVLINK_DEVICE_TYPE_SWITCH {
		t.Errorf("remote type %v", typ)
	}
	pci, _ := d4.GetPciInfo()
	if got := busString(pci); got != "00000000:04:00.0" || pci.Bus != 4 {
		t.Errorf("bus id %q bus %d", got, pci.Bus)
	}
	if n, _ := d4.GetNumaNodeId(); n != 1 {
		t.Errorf("NUMA %d", n)
	}

	set, _ := m.EventSetCreate()
	if ret := d1.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if n, _ := m.InjectXID(0, 79); n != 0 {
		t.Errorf("GPU 0 is not registered, delivered to %d sets", n)
	}
	if n, _ := m.InjectXID(1, 79); n != 1 {
		t.Errorf("delivered to %d sets", n)
	}
	ev, ret := set.Wait(1000)
	if ret != nvml.SUCCESS || ev.EventData != 79 || ev.Device != d1 {
		t.Errorf("event %+v %v", ev, ret)
	}
	if _, ret := set.Wait(1); ret != nvml.ERROR_TIMEOUT {
		t.Errorf("empty wait: %v", ret)
	}
	set.Free()
	if _, ret := set.Wait(1000); ret != nvml.ERROR_UNINITIALIZED {
		t.Errorf("wait after free: %v", ret)
	}

	if err := m.ConfigureMIG(3, nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_4_SLICE); err != nil {
		t.Fatal(err)
	}
	d3, _ := m.DeviceGetHandleByIndex(3)
	if mode, _, _ := d3.GetMigMode(); mode != nvml.DEVICE_MIG_ENABLE {
		t.Errorf("MIG mode %d", mode)
	}
	mig, ret := d3.GetMigDeviceHandleByIndex(1)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	uuid, _ := mig.GetUUID()
	attr, _ := mig.GetAttributes()
	parent, _ := mig.GetDeviceHandleFromMigDeviceHandle()
	if !strings.HasPrefix(uuid, "MIG-") || attr.GpuInstanceSliceCount != 4 || parent != d3 {
		t.Errorf("MIG device %s %+v parent %v", uuid, attr, parent)
	}
	if _, ret := d3.GetMigDeviceHandleByIndex(2); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("third MIG device: %v", ret)
	}
	if err := m.ConfigureMIG(3, 99); err == nil {
		t.Error("unknown profile accepted")
	}
	if err := m.SetLost(8, true); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("SetLost(8): %v", err)
	}
	bad := DGXA100Topology(8)
	bad.Links[2] = []Link{{GPU: 9, Switch: -1}}
	if err := m.SetTopology(bad); err == nil {
		t.Error("link to GPU 9 accepted")
	}
	if err := m.SetTopology(DGXA100Topology(4)); err == nil {
		t.Error("4-GPU topology accepted for 8 GPUs")
	}
}

func busString(p nvml.PciInfo) string {
	var b []byte
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}
