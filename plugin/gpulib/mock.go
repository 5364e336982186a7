package gpulib

import (
	"fmt"
	"maps"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// Mock is a go-nvml mock server whose devices answer the calls the node programs make.
type Mock struct {
	*server.Server
}

// mocks maps --nvml-mock names to constructors.
var mocks = map[string]func() *server.Server{
	"dgxa100": dgxa100.New,
}

// Mocks lists the accepted --nvml-mock names, sorted.
func Mocks() []string {
	return slices.Sorted(maps.Keys(mocks))
}

// MockOption changes a mock before it is returned.
type MockOption func(*Mock)

// WithDriverVersion sets the driver version the mock reports ("" keeps the mock's own,
// 550.54.15 for dgxa100).
func WithDriverVersion(v string) MockOption {
	return func(m *Mock) {
		if v != "" {
			m.DriverVersion = v
			m.NvmlVersion = "12." + v
		}
	}
}

// WithCUDADriverVersion sets the CUDA driver version the mock reports, in NVML's encoding
// (1000*major + 10*minor, 12080 for 12.8); 0 keeps the mock's own.
func WithCUDADriverVersion(v int) MockOption {
	return func(m *Mock) {
		if v != 0 {
			m.CudaDriverVersion = v
		}
	}
}

// NewMock returns the named mock with telemetry, topology and events filled in.
func NewMock(name string, opts ...MockOption) (*Mock, error) {
	newServer, ok := mocks[name]
	if !ok {
		return nil, fmt.Errorf("unknown --nvml-mock %q (known: %v)", name, Mocks())
	}
	m := &Mock{Server: newServer()}
	m.fillDevices()   // mock_devices.go: topology, PCI, MIG, events, faults
	m.fillTelemetry() // mock_telemetry.go: utilisation, memory, power, ECC, GPM; wraps fillDevices' answers
	for _, o := range opts {
		o(m)
	}
	return m, nil
}
