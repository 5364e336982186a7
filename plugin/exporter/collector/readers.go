package collector

import (
	"encoding/binary"
	"math"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// reader reads one NVML query of a GPU into its Values. A table of readers keeps the
// collection loop generic: each reader's NVML function name labels its errors, and a reader
// whose query the GPU does not support is skipped on later cycles.
type reader struct {
	call string
	read func(d nvml.Device, v *Values) nvml.Return
}

const bytesPerMiB = 1 << 20

// gpuReaders are the whole-GPU queries, one NVML call each.
var gpuReaders = buildGPUReaders()

func buildGPUReaders() []reader {
	rs := []reader{
		{"nvmlDeviceGetUtilizationRates", func(d nvml.Device, v *Values) nvml.Return {
			u, ret := d.GetUtilizationRates()
			v[GPUUtil], v[MemCopyUtil] = float64(u.Gpu), float64(u.Memory)
			return ret
		}},
		{"nvmlDeviceGetEncoderUtilization", func(d nvml.Device, v *Values) nvml.Return {
			u, _, ret := d.GetEncoderUtilization()
			v[EncUtil] = float64(u)
			return ret
		}},
		{"nvmlDeviceGetDecoderUtilization", func(d nvml.Device, v *Values) nvml.Return {
			u, _, ret := d.GetDecoderUtilization()
			v[DecUtil] = float64(u)
			return ret
		}},
		{"nvmlDeviceGetMemoryInfo_v2", readMemory},
		{"nvmlDeviceGetTemperature", func(d nvml.Device, v *Values) nvml.Return {
			t, ret := d.GetTemperature(nvml.TEMPERATURE_GPU)
			v[GPUTemp] = float64(t)
			return ret
		}},
		{"nvmlDeviceGetFieldValues", readFieldValues},
		{"nvmlDeviceGetPowerUsage", func(d nvml.Device, v *Values) nvml.Return {
			mw, ret := d.GetPowerUsage()
			v[PowerUsage] = float64(mw) / 1000
			return ret
		}},
		{"nvmlDeviceGetTotalEnergyConsumption", func(d nvml.Device, v *Values) nvml.Return {
			mj, ret := d.GetTotalEnergyConsumption()
			v[TotalEnergy] = float64(mj)
			return ret
		}},
		clockReader(nvml.CLOCK_SM, SMClock),
		clockReader(nvml.CLOCK_MEM, MemClock),
		{"nvmlDeviceGetPcieReplayCounter", func(d nvml.Device, v *Values) nvml.Return {
			n, ret := d.GetPcieReplayCounter()
			v[PCIeReplays] = float64(n)
			return ret
		}},
		eccReader(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC, ECCSBEVolatile),
		eccReader(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC, ECCDBEVolatile),
		eccReader(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.AGGREGATE_ECC, ECCSBEAggregate),
		eccReader(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.AGGREGATE_ECC, ECCDBEAggregate),
		{"nvmlDeviceGetRemappedRows", func(d nvml.Device, v *Values) nvml.Return {
			corr, unc, pending, failed, ret := d.GetRemappedRows()
			v[RemappedCorrectable], v[RemappedUncorrectable] = float64(corr), float64(unc)
			v[RowRemapPending], v[RowRemapFailure] = b2f(pending), b2f(failed)
			return ret
		}},
		{"nvmlDeviceGetCurrentClocksEventReasons", func(d nvml.Device, v *Values) nvml.Return {
			r, ret := d.GetCurrentClocksEventReasons()
			v[ClockEventReasons] = float64(r)
			return ret
		}},
	}
	for _, p := range []struct {
		policy nvml.PerfPolicyType
		field  Field
	}{
		{nvml.PERF_POLICY_POWER, PowerViolation}, {nvml.PERF_POLICY_THERMAL, ThermalViolation},
		{nvml.PERF_POLICY_SYNC_BOOST, SyncBoostViolation}, {nvml.PERF_POLICY_BOARD_LIMIT, BoardLimitViolation},
		{nvml.PERF_POLICY_LOW_UTILIZATION, LowUtilViolation}, {nvml.PERF_POLICY_RELIABILITY, ReliabilityViolation},
	} {
		rs = append(rs, reader{"nvmlDeviceGetViolationStatus", func(d nvml.Device, v *Values) nvml.Return {
			t, ret := d.GetViolationStatus(p.policy)
			v[p.field] = float64(t.ViolationTime) / 1000 // ns -> us, DCGM's unit
			return ret
		}})
	}
	return rs
}

func clockReader(c nvml.ClockType, f Field) reader {
	return reader{"nvmlDeviceGetClockInfo", func(d nvml.Device, v *Values) nvml.Return {
		mhz, ret := d.GetClockInfo(c)
		v[f] = float64(mhz)
		return ret
	}}
}

func eccReader(t nvml.MemoryErrorType, c nvml.EccCounterType, f Field) reader {
	return reader{"nvmlDeviceGetTotalEccErrors", func(d nvml.Device, v *Values) nvml.Return {
		n, ret := d.GetTotalEccErrors(t, c)
		v[f] = float64(n)
		return ret
	}}
}

// readMemory reads the framebuffer with the driver's reserved share apart (v2); drivers before
// 510 lack v2, and then reserved is what v1 counts as neither free nor used by processes.
func readMemory(d nvml.Device, v *Values) nvml.Return {
	m, ret := d.GetMemoryInfo_v2()
	if unsupported(ret) {
		m1, ret1 := d.GetMemoryInfo()
		if ret1 != nvml.SUCCESS {
			return ret1
		}
		m = nvml.Memory_v2{Total: m1.Total, Free: m1.Free, Used: m1.Used}
		ret = ret1
	}
	if ret != nvml.SUCCESS {
		return ret
	}
	v[FBFree], v[FBUsed], v[FBReserved] = mib(m.Free), mib(m.Used), mib(m.Reserved)
	return ret
}

// readFieldValues reads the memory temperature, which NVML only offers as a field value.
func readFieldValues(d nvml.Device, v *Values) nvml.Return {
	fv := []nvml.FieldValue{{FieldId: nvml.FI_DEV_MEMORY_TEMP}}
	if ret := d.GetFieldValues(fv); ret != nvml.SUCCESS {
		return ret
	}
	if r := nvml.Return(fv[0].NvmlReturn); r != nvml.SUCCESS {
		return r
	}
	v[MemoryTemp] = fieldValue(fv[0])
	return nvml.SUCCESS
}

// fieldValue decodes an NVML field value union by its type.
func fieldValue(f nvml.FieldValue) float64 {
	b := f.Value[:]
	switch nvml.ValueType(f.ValueType) {
	case nvml.VALUE_TYPE_DOUBLE:
		return math.Float64frombits(binary.NativeEndian.Uint64(b))
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		return float64(binary.NativeEndian.Uint32(b))
	case nvml.VALUE_TYPE_SIGNED_INT:
		return float64(int32(binary.NativeEndian.Uint32(b)))
	case nvml.VALUE_TYPE_UNSIGNED_SHORT:
		return float64(binary.NativeEndian.Uint16(b))
	case nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		return float64(int64(binary.NativeEndian.Uint64(b)))
	default: // unsigned long / long long
		return float64(binary.NativeEndian.Uint64(b))
	}
}

func mib(b uint64) float64 { return float64(b / bytesPerMiB) }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
