package gpumock

// Fault injection and reconfiguration of the device mock, for tests and demos: XID and ECC
// events delivered through NVML event sets, GPUs that stop answering, other topologies, MIG.

import (
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// noInstance is NVML's GPU/compute instance id for "the whole GPU" in event data.
const noInstance = ^uint32(0)

func (st *deviceState) newEventSet() *mock.EventSet {
	es := &mockEventSet{events: make(chan nvml.EventData, 1024), registered: map[int]uint64{}}
	done := make(chan struct{})
	set := &mock.EventSet{}
	set.WaitFunc = func(timeoutMs uint32) (nvml.EventData, nvml.Return) {
		timer := time.NewTimer(time.Duration(timeoutMs) * time.Millisecond)
		defer timer.Stop()
		select {
		case ev := <-es.events:
			return ev, nvml.SUCCESS
		case <-timer.C:
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		case <-done:
			return nvml.EventData{}, nvml.ERROR_UNINITIALIZED
		}
	}
	set.FreeFunc = func() nvml.Return {
		st.mu.Lock()
		defer st.mu.Unlock()
		if _, ok := st.sets[set]; ok {
			delete(st.sets, set)
			close(done)
		}
		return nvml.SUCCESS
	}
	st.mu.Lock()
	st.sets[set] = es
	st.mu.Unlock()
	return set
}

func (st *deviceState) register(i int, mask uint64, set nvml.EventSet) nvml.Return {
	ms, ok := set.(*mock.EventSet)
	if !ok {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	es, ok := st.sets[ms]
	if !ok {
		return nvml.ERROR_UNINITIALIZED
	}
	if mask&^st.allMask != 0 {
		return nvml.ERROR_NOT_SUPPORTED
	}
	es.registered[i] |= mask
	return nvml.SUCCESS
}

// state returns the device state or an error naming the GPU index when it is out of range.
func (m *Mock) state(gpu int) (*deviceState, error) {
	st := m.dev
	if st == nil {
		return nil, fmt.Errorf("mock has no device state (not made by New)")
	}
	if gpu < 0 || gpu >= len(st.gpus) {
		return nil, fmt.Errorf("mock GPU index %d out of range [0,%d)", gpu, len(st.gpus))
	}
	return st, nil
}

// InjectEvent delivers an NVML event of eventType with data for GPU gpu (gi/ci: the MIG
// instance, or ^uint32(0) for the whole GPU) to every event set registered for that type.
// It returns how many event sets received it.
func (m *Mock) InjectEvent(gpu int, eventType, data uint64, gi, ci uint32) (int, error) {
	st, err := m.state(gpu)
	if err != nil {
		return 0, err
	}
	ev := nvml.EventData{Device: st.gpus[gpu], EventType: eventType, EventData: data, GpuInstanceId: gi, ComputeInstanceId: ci}
	st.mu.Lock()
	defer st.mu.Unlock()
	n := 0
	for _, es := range st.sets {
		if es.registered[gpu]&eventType == 0 {
			continue
		}
		select {
		case es.events <- ev:
			n++
		default:
			return n, fmt.Errorf("mock event set for GPU %d is full", gpu)
		}
	}
	return n, nil
}

// InjectXID delivers a critical XID error event for the whole of GPU gpu.
func (m *Mock) InjectXID(gpu int, xid uint64) (int, error) {
	return m.InjectEvent(gpu, nvml.EventTypeXidCriticalError, xid, noInstance, noInstance)
}

// AddDoubleBitErrors raises GPU gpu's volatile uncorrected ECC count by n and sends the
// double-bit ECC event, as the driver does.
func (m *Mock) AddDoubleBitErrors(gpu int, n uint64) error {
	st, err := m.state(gpu)
	if err != nil {
		return err
	}
	st.mu.Lock()
	st.dbe[gpu] += n
	st.mu.Unlock()
	_, err = m.InjectEvent(gpu, nvml.EventTypeDoubleBitEccError, 0, noInstance, noInstance)
	return err
}

// SetLost makes GPU gpu stop answering (ERROR_GPU_IS_LOST from its queries) or answer again.
func (m *Mock) SetLost(gpu int, lost bool) error {
	st, err := m.state(gpu)
	if err != nil {
		return err
	}
	st.mu.Lock()
	st.lost[gpu] = lost
	st.mu.Unlock()
	return nil
}

// SetTopology replaces the mock's topology; it must describe every GPU.
func (m *Mock) SetTopology(t Topology) error {
	st := m.dev
	if st == nil {
		return fmt.Errorf("mock has no device state (not made by New)")
	}
	n := len(st.gpus)
	if len(t.PCIe) != n || len(t.Links) != n || len(t.NUMA) != n {
		return fmt.Errorf("mock topology describes %d/%d/%d GPUs (PCIe/Links/NUMA), the mock has %d", len(t.PCIe), len(t.Links), len(t.NUMA), n)
	}
	for i, row := range t.PCIe {
		if len(row) != n {
			return fmt.Errorf("mock topology PCIe[%d] has %d entries, want %d", i, len(row), n)
		}
		for _, l := range t.Links[i] {
			if (l.Switch < 0) == (l.GPU < 0) || l.GPU >= n {
				return fmt.Errorf("mock topology link of GPU %d must name either a GPU index < %d or a switch: %+v", i, n, l)
			}
		}
	}
	st.mu.Lock()
	st.topo = t
	st.mu.Unlock()
	return nil
}
