package gpumock

// The exporter's part of the mock: the telemetry a real GPU reports (utilisation, memory with
// the driver's reserved share, temperatures, power, energy, clocks, ECC, remapped rows, PCIe
// replays, clock event reasons and violation times) and, on Hopper and newer, GPM samples and
// metrics. Values are deterministic per GPU index so tests can assert them; the energy counter
// grows with every read like the real one. It wraps the device plugin's answers (ECC, lost
// GPUs, MIG handles) instead of replacing them, so both parts of the mock stay consistent.

import (
	"encoding/binary"
	"math"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// A Hopper mock, so GPM profiling metrics (DCGM_FI_PROF_*) can be demonstrated and tested:
// `--nvml-mock dgxh100`. Registered here to keep the telemetry feature in one file.
func init() { mocks["dgxh100"] = dgxh100.New }

// ReservedMiB is the framebuffer the mock driver reserves on every GPU (nvidia-smi's
// "Reserved"), as the 550 driver does on an A100 40GB.
const ReservedMiB = 455

// UsedMiB is the framebuffer the mock reports in use on GPU i.
func UsedMiB(i int) uint64 { return uint64(1024 * (i + 1)) }

// mockTelemetry answers the telemetry queries of one GPU.
type mockTelemetry struct {
	index  int
	dev    *server.Device
	lost   func() bool
	mu     sync.Mutex
	energy uint64 // mJ, grows on every read
	gpmSeq uint64 // samples taken, orders GPM samples
}

// fillTelemetry installs telemetry answers on every GPU of m and GPM support on the library.
// It must run after fillDevices (it wraps that part's ECC, lost and MIG answers).
func (m *Mock) fillTelemetry() {
	st := m.dev
	for i, d := range m.Devices {
		dev := d.(*server.Device)
		t := &mockTelemetry{index: i, dev: dev, lost: func() bool { return false }, energy: uint64(1_000_000 * (i + 1))}
		if st != nil {
			t.lost = func() bool { return st.isLost(i) }
		}
		t.install()
	}
	m.GpmSampleAllocFunc = func() (nvml.GpmSample, nvml.Return) { return newMockGpmSample(), nvml.SUCCESS }
	m.GpmMetricsGetFunc = mockGpmMetricsGet
}

// answer returns v with SUCCESS, or the zero value with ERROR_GPU_IS_LOST once the GPU is lost.
func answer[T any](t *mockTelemetry, v func() T) (T, nvml.Return) {
	if t.lost() {
		var zero T
		return zero, nvml.ERROR_GPU_IS_LOST
	}
	return v(), nvml.SUCCESS
}

func (t *mockTelemetry) install() {
	d, i := t.dev, t.index
	total := d.MemoryInfo.Total
	reserved := uint64(ReservedMiB) << 20
	used := UsedMiB(i) << 20
	// NVML v1 memory counts the reserved share as used; v2 reports it apart.
	d.MemoryInfo = nvml.Memory{Total: total, Used: used + reserved, Free: total - used - reserved}
	d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
		return answer(t, func() nvml.Memory_v2 {
			return nvml.Memory_v2{Version: nvml.STRUCT_VERSION(nvml.Memory_v2{}, 2), Total: total, Reserved: reserved, Used: used, Free: total - used - reserved}
		})
	}
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		if t.migEnabled() {
			return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED // as real NVML on a MIG-enabled GPU
		}
		return answer(t, func() nvml.Utilization { return nvml.Utilization{Gpu: uint32(10 + 10*i), Memory: uint32(5 + i)} })
	}
	d.GetEncoderUtilizationFunc = func() (uint32, uint32, nvml.Return) {
		v, ret := answer(t, func() uint32 { return uint32(i) })
		return v, 167000, ret
	}
	d.GetDecoderUtilizationFunc = func() (uint32, uint32, nvml.Return) {
		v, ret := answer(t, func() uint32 { return uint32(2 * i) })
		return v, 167000, ret
	}
	d.GetTemperatureFunc = func(s nvml.TemperatureSensors) (uint32, nvml.Return) {
		if s != nvml.TEMPERATURE_GPU {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return answer(t, func() uint32 { return uint32(30 + i) })
	}
	d.GetFieldValuesFunc = t.fieldValues
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return answer(t, func() uint32 { return t.powerMilliwatts() }) }
	d.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) {
		return answer(t, func() uint64 {
			t.mu.Lock()
			defer t.mu.Unlock()
			t.energy += uint64(t.powerMilliwatts()) // one second at the current draw
			return t.energy
		})
	}
	d.GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
		switch c {
		case nvml.CLOCK_SM, nvml.CLOCK_GRAPHICS:
			return answer(t, func() uint32 { return 1410 })
		case nvml.CLOCK_MEM:
			return answer(t, func() uint32 { return 1215 })
		}
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	d.GetPcieReplayCounterFunc = func() (int, nvml.Return) { return answer(t, func() int { return i }) }
	prevEcc := d.GetTotalEccErrorsFunc
	d.GetTotalEccErrorsFunc = func(e nvml.MemoryErrorType, c nvml.EccCounterType) (uint64, nvml.Return) {
		if e == nvml.MEMORY_ERROR_TYPE_UNCORRECTED && prevEcc != nil {
			return prevEcc(e, c) // the device plugin's part injects double-bit errors
		}
		return answer(t, func() uint64 {
			if e == nvml.MEMORY_ERROR_TYPE_UNCORRECTED {
				return 0
			}
			if c == nvml.AGGREGATE_ECC {
				return uint64(10 + i)
			}
			return uint64(i)
		})
	}
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) {
		v, ret := answer(t, func() int { return i % 3 })
		return v, 0, false, false, ret
	}
	d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) {
		return answer(t, func() uint64 {
			if i%2 == 0 {
				return nvml.ClocksEventReasonGpuIdle
			}
			return nvml.ClocksEventReasonNone
		})
	}
	d.GetViolationStatusFunc = func(p nvml.PerfPolicyType) (nvml.ViolationTime, nvml.Return) {
		// NVML reports violation time in ns; the mock has accumulated 1 ms per policy and GPU index.
		return answer(t, func() nvml.ViolationTime {
			return nvml.ViolationTime{ReferenceTime: 1_000_000_000, ViolationTime: uint64(1_000_000 * (int(p) + 1) * i)}
		})
	}
	gpm := d.Config.Architecture >= nvml.DEVICE_ARCH_HOPPER
	d.GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) {
		return answer(t, func() nvml.GpmSupport {
			return nvml.GpmSupport{Version: nvml.GPM_SUPPORT_VERSION, IsSupportedDevice: b2u(gpm)}
		})
	}
	d.GpmSampleGetFunc = func(s nvml.GpmSample) nvml.Return { return t.gpmSample(s, gpm) }
	d.GpmMigSampleGetFunc = func(_ int, s nvml.GpmSample) nvml.Return { return t.gpmSample(s, gpm) }
	t.wrapMigHandles()
}

func (t *mockTelemetry) powerMilliwatts() uint32 { return uint32(60_000 + 5_000*t.index) }

func (t *mockTelemetry) migEnabled() bool {
	mode, _, ret := t.dev.GetMigMode() // mig.go's state, shared with the node's other programs
	return ret == nvml.SUCCESS && mode == nvml.DEVICE_MIG_ENABLE
}

// fieldValues answers NVML field queries; only the memory temperature is modelled.
func (t *mockTelemetry) fieldValues(values []nvml.FieldValue) nvml.Return {
	if t.lost() {
		return nvml.ERROR_GPU_IS_LOST
	}
	for k := range values {
		v := &values[k]
		if v.FieldId != nvml.FI_DEV_MEMORY_TEMP {
			v.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
			continue
		}
		v.NvmlReturn = uint32(nvml.SUCCESS)
		v.ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_INT)
		binary.NativeEndian.PutUint32(v.Value[:4], uint32(35+t.index))
	}
	return nvml.SUCCESS
}

// wrapMigHandles gives the MIG devices the device plugin's part creates the telemetry a MIG
// handle answers (its own framebuffer and attributes), filling only what that part left unset.
func (t *mockTelemetry) wrapMigHandles() {
	prev := t.dev.GetMigDeviceHandleByIndexFunc
	if prev == nil {
		return
	}
	t.dev.GetMigDeviceHandleByIndexFunc = func(n int) (nvml.Device, nvml.Return) {
		md, ret := prev(n)
		if m, ok := md.(*mock.Device); ok && ret == nvml.SUCCESS {
			t.fillMigTelemetry(m)
		}
		return md, ret
	}
}

func (t *mockTelemetry) fillMigTelemetry(m *mock.Device) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if m.GetMemoryInfo_v2Func != nil {
		return
	}
	// A 1g.5gb instance unless the MIG handle says otherwise (the device plugin's part answers
	// attributes from the GPU instance's profile).
	attrs := nvml.DeviceAttributes{GpuInstanceSliceCount: 1, ComputeInstanceSliceCount: 1, MemorySizeMB: 4864}
	if m.GetAttributesFunc == nil {
		m.GetAttributesFunc = func() (nvml.DeviceAttributes, nvml.Return) {
			return answer(t, func() nvml.DeviceAttributes { return attrs })
		}
	} else if a, ret := m.GetAttributesFunc(); ret == nvml.SUCCESS {
		attrs = a
	}
	total := attrs.MemorySizeMB << 20
	used := uint64(256+64*t.index) << 20
	m.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
		return answer(t, func() nvml.Memory_v2 {
			return nvml.Memory_v2{Version: nvml.STRUCT_VERSION(nvml.Memory_v2{}, 2), Total: total, Used: used, Free: total - used}
		})
	}
	if m.GetMemoryInfoFunc == nil {
		m.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
			return answer(t, func() nvml.Memory { return nvml.Memory{Total: total, Used: used, Free: total - used} })
		}
	}
}

// mockGpmSample records how many samples a GPU has taken, so metrics between two samples
// are only answered when the second sample is newer, as NVML requires.
type mockGpmSample struct {
	mock.GpmSample
	seq uint64
}

func newMockGpmSample() *mockGpmSample {
	s := &mockGpmSample{}
	s.FreeFunc = func() nvml.Return { return nvml.SUCCESS }
	return s
}

func (t *mockTelemetry) gpmSample(s nvml.GpmSample, supported bool) nvml.Return {
	if !supported {
		return nvml.ERROR_NOT_SUPPORTED
	}
	if t.lost() {
		return nvml.ERROR_GPU_IS_LOST
	}
	ms, ok := s.(*mockGpmSample)
	if !ok {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	t.mu.Lock()
	t.gpmSeq++
	ms.seq = t.gpmSeq
	t.mu.Unlock()
	return nvml.SUCCESS
}

// mockGpmMetricsGet answers every requested metric: ratios as percentages (NVML's unit for
// the *_UTIL metrics) and rates in bytes/s (PCIe: MiB/s in NVML), derived from the metric id.
func mockGpmMetricsGet(g *nvml.GpmMetricsGetType) nvml.Return {
	s1, ok1 := g.Sample1.(*mockGpmSample)
	s2, ok2 := g.Sample2.(*mockGpmSample)
	if !ok1 || !ok2 || s1.seq == 0 || s2.seq <= s1.seq || g.NumMetrics > uint32(len(g.Metrics)) {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	for k := range g.NumMetrics {
		id := g.Metrics[k].MetricId
		g.Metrics[k].NvmlReturn = uint32(nvml.SUCCESS)
		g.Metrics[k].Value = math.Mod(float64(id)*7.5, 100)
	}
	return nvml.SUCCESS
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}
