package collector

import (
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// gpuGone reports whether ret means the GPU itself stopped answering (fell off the bus, needs a
// reset), as opposed to one query failing; such a GPU is reported up=0 and the rest of its
// queries are skipped until the next cycle. ERROR_UNKNOWN is not among them: single queries
// return it on healthy GPUs too, and it is still visible as the GPU's last error.
func gpuGone(ret nvml.Return) bool {
	switch ret {
	case nvml.ERROR_GPU_IS_LOST, nvml.ERROR_RESET_REQUIRED, nvml.ERROR_GPU_NOT_FOUND:
		return true
	}
	return false
}

// unsupported reports whether ret means this GPU, driver or MIG mode cannot answer the query:
// the value is skipped without counting an error.
func unsupported(ret nvml.Return) bool {
	switch ret {
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND, nvml.ERROR_NOT_FOUND:
		return true
	}
	return false
}

// returnName is NVML's constant name of ret ("ERROR_GPU_IS_LOST"), stable for labels whether
// or not the real library (whose ErrorString gives prose) is loaded.
func returnName(ret nvml.Return) string {
	if name, ok := returnNames[ret]; ok {
		return name
	}
	return "ERROR_CODE_" + strconv.Itoa(int(ret))
}

var returnNames = map[nvml.Return]string{
	nvml.SUCCESS: "SUCCESS", nvml.ERROR_UNINITIALIZED: "ERROR_UNINITIALIZED",
	nvml.ERROR_INVALID_ARGUMENT: "ERROR_INVALID_ARGUMENT", nvml.ERROR_NOT_SUPPORTED: "ERROR_NOT_SUPPORTED",
	nvml.ERROR_NO_PERMISSION: "ERROR_NO_PERMISSION", nvml.ERROR_ALREADY_INITIALIZED: "ERROR_ALREADY_INITIALIZED",
	nvml.ERROR_NOT_FOUND: "ERROR_NOT_FOUND", nvml.ERROR_INSUFFICIENT_SIZE: "ERROR_INSUFFICIENT_SIZE",
	nvml.ERROR_INSUFFICIENT_POWER: "ERROR_INSUFFICIENT_POWER", nvml.ERROR_DRIVER_NOT_LOADED: "ERROR_DRIVER_NOT_LOADED",
	nvml.ERROR_TIMEOUT: "ERROR_TIMEOUT", nvml.ERROR_IRQ_ISSUE: "ERROR_IRQ_ISSUE",
	nvml.ERROR_LIBRARY_NOT_FOUND: "ERROR_LIBRARY_NOT_FOUND", nvml.ERROR_FUNCTION_NOT_FOUND: "ERROR_FUNCTION_NOT_FOUND",
	nvml.ERROR_CORRUPTED_INFOROM: "ERROR_CORRUPTED_INFOROM", nvml.ERROR_GPU_IS_LOST: "ERROR_GPU_IS_LOST",
	nvml.ERROR_RESET_REQUIRED: "ERROR_RESET_REQUIRED", nvml.ERROR_OPERATING_SYSTEM: "ERROR_OPERATING_SYSTEM",
	nvml.ERROR_LIB_RM_VERSION_MISMATCH: "ERROR_LIB_RM_VERSION_MISMATCH", nvml.ERROR_IN_USE: "ERROR_IN_USE",
	nvml.ERROR_MEMORY: "ERROR_MEMORY", nvml.ERROR_NO_DATA: "ERROR_NO_DATA",
	nvml.ERROR_VGPU_ECC_NOT_SUPPORTED: "ERROR_VGPU_ECC_NOT_SUPPORTED", nvml.ERROR_INSUFFICIENT_RESOURCES: "ERROR_INSUFFICIENT_RESOURCES",
	nvml.ERROR_FREQ_NOT_SUPPORTED: "ERROR_FREQ_NOT_SUPPORTED", nvml.ERROR_ARGUMENT_VERSION_MISMATCH: "ERROR_ARGUMENT_VERSION_MISMATCH",
	nvml.ERROR_DEPRECATED: "ERROR_DEPRECATED", nvml.ERROR_NOT_READY: "ERROR_NOT_READY",
	nvml.ERROR_GPU_NOT_FOUND: "ERROR_GPU_NOT_FOUND", nvml.ERROR_INVALID_STATE: "ERROR_INVALID_STATE",
	nvml.ERROR_UNKNOWN: "ERROR_UNKNOWN",
}

// callErrors counts failed NVML calls by function and return code. The collection loop and the
// XID watcher both record into it.
type callErrors struct {
	mu     sync.Mutex
	counts map[callKey]uint64
}

type callKey struct {
	call string
	ret  nvml.Return
}

func (c *callErrors) add(call string, ret nvml.Return) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[callKey]uint64{}
	}
	c.counts[callKey{call, ret}]++
}

// list returns the counts sorted by call, then error name.
func (c *callErrors) list() []CallError {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]CallError, 0, len(c.counts))
	for k, n := range c.counts {
		out = append(out, CallError{Call: k.call, Error: returnName(k.ret), Count: n})
	}
	slices.SortFunc(out, func(a, b CallError) int {
		if a.Call != b.Call {
			return strings.Compare(a.Call, b.Call)
		}
		return strings.Compare(a.Error, b.Error)
	})
	return out
}
