package collector

import "github.com/NVIDIA/go-nvml/pkg/nvml"

// GPM (GPU Performance Monitoring, Hopper and newer) gives DCGM's profiling metrics from two
// samples taken an interval apart. Older GPUs answer GpmQueryDeviceSupport with "not
// supported" and simply get no DCGM_FI_PROF_* series.

// gpmMetric maps one NVML GPM metric to its field; scale converts NVML's unit to DCGM's
// (percent -> ratio, MiB/s -> bytes/s).
type gpmMetric struct {
	id    nvml.GpmMetricId
	field Field
	scale float64
}

var gpmMetrics = []gpmMetric{
	{nvml.GPM_METRIC_GRAPHICS_UTIL, ProfGrEngineActive, 0.01},
	{nvml.GPM_METRIC_SM_UTIL, ProfSMActive, 0.01},
	{nvml.GPM_METRIC_SM_OCCUPANCY, ProfSMOccupancy, 0.01},
	{nvml.GPM_METRIC_ANY_TENSOR_UTIL, ProfTensorActive, 0.01},
	{nvml.GPM_METRIC_DRAM_BW_UTIL, ProfDRAMActive, 0.01},
	{nvml.GPM_METRIC_FP64_UTIL, ProfFP64Active, 0.01},
	{nvml.GPM_METRIC_FP32_UTIL, ProfFP32Active, 0.01},
	{nvml.GPM_METRIC_FP16_UTIL, ProfFP16Active, 0.01},
	{nvml.GPM_METRIC_PCIE_TX_PER_SEC, ProfPCIeTxBytes, bytesPerMiB},
	{nvml.GPM_METRIC_PCIE_RX_PER_SEC, ProfPCIeRxBytes, bytesPerMiB},
	{nvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, ProfNVLinkTxBytes, bytesPerMiB},
	{nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, ProfNVLinkRxBytes, bytesPerMiB},
}

// gpmSampler keeps the previous and current sample of one GPU or GPU instance.
type gpmSampler struct {
	prev, cur nvml.GpmSample
	havePrev  bool
}

func newGPMSampler(lib nvml.Interface) (*gpmSampler, nvml.Return) {
	a, ret := lib.GpmSampleAlloc()
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	b, ret := lib.GpmSampleAlloc()
	if ret != nvml.SUCCESS {
		a.Free()
		return nil, ret
	}
	return &gpmSampler{prev: a, cur: b}, nvml.SUCCESS
}

func (s *gpmSampler) free() {
	s.prev.Free()
	s.cur.Free()
}

// sample takes a new sample with take and, from the second call on, writes the metrics between
// the last two samples into v. It returns the failing NVML call, if any.
func (s *gpmSampler) sample(lib nvml.Interface, buf *nvml.GpmMetricsGetType, take func(nvml.GpmSample) nvml.Return, v *Values) (string, nvml.Return) {
	if ret := take(s.cur); ret != nvml.SUCCESS {
		return "nvmlGpmSampleGet", ret
	}
	defer func() { s.prev, s.cur, s.havePrev = s.cur, s.prev, true }()
	if !s.havePrev {
		return "", nvml.SUCCESS
	}
	buf.NumMetrics = uint32(len(gpmMetrics))
	buf.Sample1, buf.Sample2 = s.prev, s.cur
	for i, m := range gpmMetrics {
		buf.Metrics[i] = nvml.GpmMetric{MetricId: uint32(m.id)}
	}
	if ret := lib.GpmMetricsGet(buf); ret != nvml.SUCCESS {
		return "nvmlGpmMetricsGet", ret
	}
	for i, m := range gpmMetrics {
		if nvml.Return(buf.Metrics[i].NvmlReturn) == nvml.SUCCESS {
			v[m.field] = buf.Metrics[i].Value * m.scale
		}
	}
	return "", nvml.SUCCESS
}
