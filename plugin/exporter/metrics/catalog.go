package metrics

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpupolicy/gpupolicy/plugin/exporter/collector"
)

// fieldSpec names a collector field the way dcgm-exporter's default-counters.csv does, so
// existing dashboards and alerts work unchanged.
type fieldSpec struct {
	field collector.Field
	name  string
	kind  prometheus.ValueType
	help  string
}

var catalog = []fieldSpec{
	{collector.GPUUtil, "DCGM_FI_DEV_GPU_UTIL", prometheus.GaugeValue, "GPU utilization (in %)."},
	{collector.MemCopyUtil, "DCGM_FI_DEV_MEM_COPY_UTIL", prometheus.GaugeValue, "Memory utilization (in %)."},
	{collector.EncUtil, "DCGM_FI_DEV_ENC_UTIL", prometheus.GaugeValue, "Encoder utilization (in %)."},
	{collector.DecUtil, "DCGM_FI_DEV_DEC_UTIL", prometheus.GaugeValue, "Decoder utilization (in %)."},
	{collector.FBFree, "DCGM_FI_DEV_FB_FREE", prometheus.GaugeValue, "Framebuffer memory free (in MiB)."},
	{collector.FBUsed, "DCGM_FI_DEV_FB_USED", prometheus.GaugeValue, "Framebuffer memory used (in MiB)."},
	{collector.FBReserved, "DCGM_FI_DEV_FB_RESERVED", prometheus.GaugeValue, "Framebuffer memory reserved (in MiB)."},
	{collector.GPUTemp, "DCGM_FI_DEV_GPU_TEMP", prometheus.GaugeValue, "GPU temperature (in C)."},
	{collector.MemoryTemp, "DCGM_FI_DEV_MEMORY_TEMP", prometheus.GaugeValue, "Memory temperature (in C)."},
	{collector.PowerUsage, "DCGM_FI_DEV_POWER_USAGE", prometheus.GaugeValue, "Power draw (in W)."},
	{collector.TotalEnergy, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", prometheus.CounterValue, "Total energy consumption since boot (in mJ)."},
	{collector.SMClock, "DCGM_FI_DEV_SM_CLOCK", prometheus.GaugeValue, "SM clock frequency (in MHz)."},
	{collector.MemClock, "DCGM_FI_DEV_MEM_CLOCK", prometheus.GaugeValue, "Memory clock frequency (in MHz)."},
	{collector.PCIeReplays, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", prometheus.CounterValue, "Total number of PCIe retries."},
	{collector.ECCSBEVolatile, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", prometheus.CounterValue, "Total number of single-bit volatile ECC errors."},
	{collector.ECCDBEVolatile, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", prometheus.CounterValue, "Total number of double-bit volatile ECC errors."},
	{collector.ECCSBEAggregate, "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", prometheus.CounterValue, "Total number of single-bit persistent ECC errors."},
	{collector.ECCDBEAggregate, "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", prometheus.CounterValue, "Total number of double-bit persistent ECC errors."},
	{collector.RemappedCorrectable, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", prometheus.CounterValue, "Number of remapped rows for correctable errors."},
	{collector.RemappedUncorrectable, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", prometheus.CounterValue, "Number of remapped rows for uncorrectable errors."},
	{collector.RowRemapPending, "DCGM_FI_DEV_ROW_REMAP_PENDING", prometheus.GaugeValue, "Whether remapping of rows is pending (a GPU reset applies it)."},
	{collector.RowRemapFailure, "DCGM_FI_DEV_ROW_REMAP_FAILURE", prometheus.GaugeValue, "Whether remapping of rows has failed."},
	{collector.ClockEventReasons, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", prometheus.GaugeValue, "Current clock throttle reasons (bitmask of nvmlClocksEventReason*)."},
	{collector.PowerViolation, "DCGM_FI_DEV_POWER_VIOLATION", prometheus.CounterValue, "Throttling duration due to power constraints (in us)."},
	{collector.ThermalViolation, "DCGM_FI_DEV_THERMAL_VIOLATION", prometheus.CounterValue, "Throttling duration due to thermal constraints (in us)."},
	{collector.SyncBoostViolation, "DCGM_FI_DEV_SYNC_BOOST_VIOLATION", prometheus.CounterValue, "Throttling duration due to sync-boost constraints (in us)."},
	{collector.BoardLimitViolation, "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", prometheus.CounterValue, "Throttling duration due to board limit constraints (in us)."},
	{collector.LowUtilViolation, "DCGM_FI_DEV_LOW_UTIL_VIOLATION", prometheus.CounterValue, "Throttling duration due to low utilization (in us)."},
	{collector.ReliabilityViolation, "DCGM_FI_DEV_RELIABILITY_VIOLATION", prometheus.CounterValue, "Throttling duration due to reliability constraints (in us)."},
	{collector.ProfGrEngineActive, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", prometheus.GaugeValue, "Ratio of time the graphics engine is active."},
	{collector.ProfSMActive, "DCGM_FI_PROF_SM_ACTIVE", prometheus.GaugeValue, "The ratio of cycles an SM has at least 1 warp assigned."},
	{collector.ProfSMOccupancy, "DCGM_FI_PROF_SM_OCCUPANCY", prometheus.GaugeValue, "The ratio of number of warps resident on an SM."},
	{collector.ProfTensorActive, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", prometheus.GaugeValue, "Ratio of cycles the tensor (HMMA) pipe is active."},
	{collector.ProfDRAMActive, "DCGM_FI_PROF_DRAM_ACTIVE", prometheus.GaugeValue, "Ratio of cycles the device memory interface is active sending or receiving data."},
	{collector.ProfFP64Active, "DCGM_FI_PROF_PIPE_FP64_ACTIVE", prometheus.GaugeValue, "Ratio of cycles the fp64 pipes are active."},
	{collector.ProfFP32Active, "DCGM_FI_PROF_PIPE_FP32_ACTIVE", prometheus.GaugeValue, "Ratio of cycles the fp32 pipes are active."},
	{collector.ProfFP16Active, "DCGM_FI_PROF_PIPE_FP16_ACTIVE", prometheus.GaugeValue, "Ratio of cycles the fp16 pipes are active."},
	{collector.ProfPCIeTxBytes, "DCGM_FI_PROF_PCIE_TX_BYTES", prometheus.GaugeValue, "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second."},
	{collector.ProfPCIeRxBytes, "DCGM_FI_PROF_PCIE_RX_BYTES", prometheus.GaugeValue, "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second."},
	{collector.ProfNVLinkTxBytes, "DCGM_FI_PROF_NVLINK_TX_BYTES", prometheus.GaugeValue, "The rate of data transmitted over NVLink, not including protocol headers, in bytes per second."},
	{collector.ProfNVLinkRxBytes, "DCGM_FI_PROF_NVLINK_RX_BYTES", prometheus.GaugeValue, "The rate of data received over NVLink, not including protocol headers, in bytes per second."},
}

// Label names, spelled as dcgm-exporter spells them.
var (
	gpuLabels  = []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}
	dcgmLabels = append(append([]string{}, gpuLabels...), "GPU_I_PROFILE", "GPU_I_ID", "container", "namespace", "pod")
)

// Names of this project's own metrics; /tmp/team/EXPORTER_METRICS.md and the rendered
// PrometheusRule use them.
const (
	NameGPUUp              = "gpupolicy_gpu_up"
	NameGPULastError       = "gpupolicy_gpu_last_error_timestamp_seconds"
	NameGPUXIDErrors       = "gpupolicy_gpu_xid_errors_total"
	NameDriverInfo         = "gpupolicy_node_driver_info"
	NameCollectionDuration = "gpupolicy_exporter_collection_duration_seconds"
	NameCollections        = "gpupolicy_exporter_collections_total"
	NameLastCollection     = "gpupolicy_exporter_last_collection_timestamp_seconds"
	NameNVMLErrors         = "gpupolicy_exporter_nvml_errors_total"
	NamePodRequests        = "gpupolicy_exporter_pod_resources_requests_total"
	NamePodLastSuccess     = "gpupolicy_exporter_pod_resources_last_success_timestamp_seconds"
	NameXIDErrors          = "DCGM_FI_DEV_XID_ERRORS"
)

// Names lists every metric family the exporter emits itself (not the Go/process collectors),
// sorted; dashboards and rules may only use these.
func Names() []string {
	names := []string{NameGPUUp, NameGPULastError, NameGPUXIDErrors, NameDriverInfo, NameCollectionDuration,
		NameCollections, NameLastCollection, NameNVMLErrors, NamePodRequests, NamePodLastSuccess, NameXIDErrors}
	for _, s := range catalog {
		names = append(names, s.name)
	}
	slices.Sort(names)
	return names
}
