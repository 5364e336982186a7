// Package gpulib is the one seam between the node programs and NVIDIA's management library:
// go-nvml's nvml.Interface, backed by the real libnvidia-ml.so.1 or, for demos and tests, by
// a go-nvml mock server with telemetry filled in (--nvml-mock, package gpumock), plus what
// several programs share: the readings of NVML's answers and the one NVML event loop
// (EventWatcher). It is not called nvml so that "nvml." in any file is go-nvml itself,
// imported without an alias.
package gpulib

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

// ErrLibraryNotFound is returned when libnvidia-ml.so.1 cannot be loaded on this host.
var ErrLibraryNotFound = errors.New("libnvidia-ml.so.1 not found: run this container with the nvidia runtime class (toolkit stage done) or pass --nvml-mock for a demo")

// ErrDriverNotLoaded is returned when the library loads but the kernel module is not loaded.
var ErrDriverNotLoaded = errors.New("nvml: the NVIDIA kernel driver is not loaded on this node (check the driver stage: /proc/driver/nvidia/version)")

// CUDAVersion renders NVML's CUDA driver version encoding (12080) as "12.8".
func CUDAVersion(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// ParseCUDAVersion is CUDAVersion's inverse ("12.8" -> 12080).
func ParseCUDAVersion(s string) (int, error) {
	var major, minor int
	if n, err := fmt.Sscanf(s, "%d.%d", &major, &minor); err != nil || n != 2 || minor > 99 {
		return 0, fmt.Errorf("CUDA version %q is not MAJOR.MINOR (e.g. 12.8)", s)
	}
	return major*1000 + minor*10, nil
}

// Open initialises NVML: the real library when mock is "", else the named mock (see
// gpumock.Names) changed by opts. The caller must call Shutdown on the returned interface.
func Open(mock string, opts ...gpumock.Option) (nvml.Interface, error) {
	var lib nvml.Interface
	if mock == "" {
		lib = nvml.New()
	} else {
		m, err := gpumock.New(mock, opts...)
		if err != nil {
			return nil, err
		}
		lib = m
	}
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
		return lib, nil
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, ErrLibraryNotFound
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return nil, ErrDriverNotLoaded
	default:
		return nil, fmt.Errorf("nvml init: %s", nvml.ErrorString(ret))
	}
}
