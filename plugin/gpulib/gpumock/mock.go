// Package gpumock is the NVML the node programs run on for demos and tests (--nvml-mock): a
// go-nvml mock server (DGX A100 or DGX H100) whose devices also answer the calls the device
// plugin, the exporter and the agent make, with faults a test can inject. It lives apart from
// the seam (plugin/gpulib) so that a reader of the seam finds the seam, not ~900 lines of mock;
// it must not import the seam, which opens it for --nvml-mock.
package gpumock

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// Mock is a go-nvml mock server whose devices answer the calls the node programs make.
type Mock struct {
	*server.Server
	dev *deviceState // devices.go: topology, faults, MIG devices, event sets; nil unless made by New
}

// mocks maps --nvml-mock names to constructors.
var mocks = map[string]func() *server.Server{
	"dgxa100": dgxa100.New,
}

// Names lists the accepted --nvml-mock names, sorted.
func Names() []string {
	return slices.Sorted(maps.Keys(mocks))
}

// Option changes a mock before it is returned.
type Option func(*Mock)

// WithDriverVersion sets the driver version the mock reports ("" keeps the mock's own,
// 550.54.15 for dgxa100).
func WithDriverVersion(v string) Option {
	return func(m *Mock) {
		if v != "" {
			m.DriverVersion = v
			m.NvmlVersion = "12." + v
		}
	}
}

// WithCUDADriverVersion sets the CUDA driver version the mock reports, in NVML's encoding
// (1000*major + 10*minor, 12080 for 12.8); 0 keeps the mock's own.
func WithCUDADriverVersion(v int) Option {
	return func(m *Mock) {
		if v != 0 {
			m.CudaDriverVersion = v
		}
	}
}

// New returns the named mock with telemetry, topology and events filled in.
func New(name string, opts ...Option) (*Mock, error) {
	newServer, ok := mocks[name]
	if !ok {
		return nil, fmt.Errorf("unknown --nvml-mock %q (known: %v)", name, Names())
	}
	m := &Mock{Server: newServer()}
	// go-nvml's mock draws random UUIDs; separate processes on one node (device plugin,
	// exporter, the e2e suite's nvidia-ctk) must agree on them, as they do on a real GPU.
	// Its device names carry a "Mock " prefix; they are the real models' names here, so the
	// product label and the MIG step's check of a pool's gpuProduct read as on the hardware.
	for i, d := range m.Devices {
		if sd, ok := d.(*server.Device); ok {
			sd.UUID = "GPU-" + uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "gpumock/%s/%d", name, i)).String()
			sd.Config.Name = strings.TrimPrefix(sd.Config.Name, "Mock ")
		}
	}
	m.fillDevices()   // mock_devices.go: topology, PCI, MIG, events, faults
	m.fillTelemetry() // mock_telemetry.go: utilisation, memory, power, ECC, GPM; wraps fillDevices' answers
	for _, o := range opts {
		o(m)
	}
	return m, nil
}
