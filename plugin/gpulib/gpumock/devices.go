package gpumock

// The device plugin's part of the mock: PCI bus ids, the NVLink/PCIe topology of a DGX A100
// (eight GPUs, all-to-all through six NVSwitches, PCIe pairs under four switches, two NUMA
// nodes), MIG devices, and event sets whose XIDs a test injects. A real DGX A100 answers the
// same calls the same way, so the plugin's code paths are the production ones.

import (
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// Link is one NVLink of a GPU: to another GPU (Switch < 0) or to NVSwitch number Switch.
type Link struct {
	GPU    int
	Switch int
}

// Topology is what the mock answers for topology queries. PCIe[i][j] is the common
// ancestor level of GPUs i and j; Links[i] are GPU i's NVLinks in link order; NUMA[i] is the
// NUMA node NVML reports for GPU i.
type Topology struct {
	PCIe  [][]nvml.GpuTopologyLevel
	Links [][]Link
	NUMA  []int
}

// DGXA100Topology returns the topology of a DGX A100 with n GPUs: 12 NVLinks per GPU, two to
// each of six NVSwitches; GPU pairs (0,1), (2,3), ... behind one PCIe switch; the first half on
// NUMA node 0, the second half on node 1.
func DGXA100Topology(n int) Topology { return NVSwitchTopology(n, 12, 6) }

// NVSwitchTopology is a DGX-style topology: n GPUs with links NVLinks each, spread evenly over
// switches NVSwitches (DGX H100: 18 over 4; DGX B200: 18 over 2), PCIe and NUMA as in
// DGXA100Topology.
func NVSwitchTopology(n, links, switches int) Topology {
	t := Topology{PCIe: make([][]nvml.GpuTopologyLevel, n), Links: make([][]Link, n), NUMA: make([]int, n)}
	for i := range n {
		t.NUMA[i] = i * 2 / max(n, 1)
		t.PCIe[i] = make([]nvml.GpuTopologyLevel, n)
		for j := range n {
			switch {
			case i == j:
				t.PCIe[i][j] = nvml.TOPOLOGY_INTERNAL
			case i/2 == j/2:
				t.PCIe[i][j] = nvml.TOPOLOGY_MULTIPLE
			case i*2/n == j*2/n:
				t.PCIe[i][j] = nvml.TOPOLOGY_NODE
			default:
				t.PCIe[i][j] = nvml.TOPOLOGY_SYSTEM
			}
		}
		for l := range links {
			t.Links[i] = append(t.Links[i], Link{GPU: -1, Switch: l * switches / links})
		}
	}
	return t
}

// topologyFor picks the NVSwitch layout of the DGX generation of the mock's GPUs.
func topologyFor(gpus []*server.Device) Topology {
	if len(gpus) > 0 {
		switch gpus[0].Config.Architecture {
		case nvml.DEVICE_ARCH_HOPPER:
			return NVSwitchTopology(len(gpus), 18, 4)
		case nvml.DEVICE_ARCH_BLACKWELL:
			return NVSwitchTopology(len(gpus), 18, 2)
		}
	}
	return DGXA100Topology(len(gpus))
}

// deviceState is the mutable part of the device mock: topology, faults, MIG devices and
// the event sets devices are registered with.
type deviceState struct {
	mu   sync.Mutex
	gpus []*server.Device
	// mig is every GPU's partitioning (mig.go); migFile, when set, is where it is shared with
	// the node's other mock programs, migRaw the bytes last read or written there.
	mig     migState
	migFile string
	migRaw  []byte
	built   []*gpuMIG // the partitioning each GPU's migs were made from
	topo    Topology
	lost    []bool
	dbe     []uint64
	migs    [][]*mock.Device
	sets    map[*mock.EventSet]*mockEventSet
	allMask uint64
	// computeMode of each GPU (the MPS control daemon sets EXCLUSIVE_PROCESS); NVML's
	// default is DEFAULT. Per process, as the hardware's is not: tests read it back.
	computeMode map[int]nvml.ComputeMode
}

// mockEventSet delivers injected events to one EventSet.Wait caller.
type mockEventSet struct {
	events chan nvml.EventData
	// registered[gpu index] is the event mask RegisterEvents enabled for that GPU.
	registered map[int]uint64
}

// fillDevices installs topology, PCI, MIG, health and event answers on every GPU of m.
func (m *Mock) fillDevices() {
	st := &deviceState{sets: map[*mock.EventSet]*mockEventSet{},
		allMask: nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError}
	for _, d := range m.Devices {
		st.gpus = append(st.gpus, d.(*server.Device))
	}
	n := len(st.gpus)
	st.topo = topologyFor(st.gpus)
	st.lost, st.dbe, st.migs = make([]bool, n), make([]uint64, n), make([][]*mock.Device, n)
	st.mig, st.migFile = st.freshMIG(), os.Getenv(MIGStateEnv)
	m.dev = st

	m.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return st.newEventSet(), nvml.SUCCESS }
	m.EventSetWaitFunc = func(set nvml.EventSet, timeoutMs uint32) (nvml.EventData, nvml.Return) {
		return set.Wait(timeoutMs)
	}
	m.EventSetFreeFunc = func(set nvml.EventSet) nvml.Return { return set.Free() }
	for i, d := range st.gpus {
		st.fillGPU(i, d)
	}
}

func (st *deviceState) fillGPU(i int, d *server.Device) {
	d.GetComputeModeFunc = func() (nvml.ComputeMode, nvml.Return) {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.computeMode[i], nvml.SUCCESS // the zero value is COMPUTEMODE_DEFAULT
	}
	d.SetComputeModeFunc = func(m nvml.ComputeMode) nvml.Return {
		if m < nvml.COMPUTEMODE_DEFAULT || m >= nvml.COMPUTEMODE_COUNT {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		if st.computeMode == nil {
			st.computeMode = map[int]nvml.ComputeMode{}
		}
		st.computeMode[i] = m
		return nvml.SUCCESS
	}
	prevPci := d.GetPciInfoFunc
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		p := nvml.PciInfo{}
		if prevPci != nil {
			if got, ret := prevPci(); ret == nvml.SUCCESS {
				p = got
			}
		}
		if p.BusId[0] == 0 {
			p = withBusID(p, d.PciBusID)
		}
		return p, nvml.SUCCESS
	}
	d.GetTopologyCommonAncestorFunc = func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
		j := st.indexOf(other)
		if j < 0 {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.topo.PCIe[i][j], nvml.SUCCESS
	}
	d.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
		if _, ok := st.link(i, l); !ok {
			return nvml.FEATURE_DISABLED, nvml.ERROR_INVALID_ARGUMENT
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetNvLinkRemoteDeviceTypeFunc = func(l int) (nvml.IntNvLinkDeviceType, nvml.Return) {
		link, ok := st.link(i, l)
		switch {
		case !ok:
			return nvml.NVLINK_DEVICE_TYPE_UNKNOWN, nvml.ERROR_INVALID_ARGUMENT
		case link.Switch >= 0:
			return nvml.NVLINK_DEVICE_TYPE_SWITCH, nvml.SUCCESS
		default:
			return nvml.NVLINK_DEVICE_TYPE_GPU, nvml.SUCCESS
		}
	}
	d.GetNvLinkRemotePciInfoFunc = func(l int) (nvml.PciInfo, nvml.Return) {
		link, ok := st.link(i, l)
		switch {
		case !ok:
			return nvml.PciInfo{}, nvml.ERROR_INVALID_ARGUMENT
		case link.Switch >= 0:
			// NVSwitches sit on their own buses, as on a DGX A100 (0000:c0..c5:00.0 here).
			return withBusID(nvml.PciInfo{}, fmt.Sprintf("0000:%02x:00.0", 0xc0+link.Switch)), nvml.SUCCESS
		default:
			return withBusID(nvml.PciInfo{}, st.gpus[link.GPU].PciBusID), nvml.SUCCESS
		}
	}
	d.GetNumaNodeIdFunc = func() (int, nvml.Return) {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.topo.NUMA[i], nvml.SUCCESS
	}
	d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return st.allMask, nvml.SUCCESS }
	d.RegisterEventsFunc = func(mask uint64, set nvml.EventSet) nvml.Return {
		return st.register(i, mask, set)
	}
	prevMem := d.GetMemoryInfoFunc
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		if st.isLost(i) {
			return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
		}
		return prevMem()
	}
	d.GetTotalEccErrorsFunc = func(t nvml.MemoryErrorType, c nvml.EccCounterType) (uint64, nvml.Return) {
		if st.isLost(i) {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		if t != nvml.MEMORY_ERROR_TYPE_UNCORRECTED {
			return 0, nvml.SUCCESS
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.dbe[i], nvml.SUCCESS
	}
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(n int) (nvml.Device, nvml.Return) {
		var dev nvml.Device
		ret := st.read(func(*migState) {
			if devs := st.migDevices(i); n >= 0 && n < len(devs) {
				dev = devs[n]
			}
		})
		if ret == nvml.SUCCESS && dev == nil {
			ret = nvml.ERROR_NOT_FOUND
		}
		return dev, ret
	}
	d.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return false, nvml.SUCCESS }
	// An A100 is not on a multi-node NVLink fabric (IMEX): NVML answers NOT_SUPPORTED, which
	// gpu-feature-discovery reads as "no clique label".
	d.GetGpuFabricInfoFunc = func() (nvml.GpuFabricInfo, nvml.Return) { return nvml.GpuFabricInfo{}, nvml.ERROR_NOT_SUPPORTED }
	// Bare metal: neither a vGPU nor passed through to a VM.
	d.GetVirtualizationModeFunc = func() (nvml.GpuVirtualizationMode, nvml.Return) {
		return nvml.GPU_VIRTUALIZATION_MODE_NONE, nvml.SUCCESS
	}
	st.fillMIG(i, d)
}

// withBusID sets the NVML form of a PCI bus id ("00000000:07:00.0") from a short form.
func withBusID(p nvml.PciInfo, busID string) nvml.PciInfo {
	long := strings.ToUpper(busID)
	if len(strings.SplitN(long, ":", 2)[0]) == 4 {
		long = "0000" + long
	}
	for k := range p.BusId {
		p.BusId[k] = 0
	}
	for k := 0; k < len(long) && k < len(p.BusId)-1; k++ {
		p.BusId[k] = int8(long[k])
	}
	var dom, bus, dev uint32
	_, _ = fmt.Sscanf(long, "%x:%x:%x", &dom, &bus, &dev)
	p.Domain, p.Bus, p.Device = dom, bus, dev
	return p
}

func (st *deviceState) indexOf(d nvml.Device) int {
	for i, g := range st.gpus {
		if nvml.Device(g) == d {
			return i
		}
	}
	return -1
}

func (st *deviceState) link(i, l int) (Link, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if l < 0 || l >= len(st.topo.Links[i]) {
		return Link{}, false
	}
	return st.topo.Links[i][l], true
}

func (st *deviceState) isLost(i int) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.lost[i]
}
