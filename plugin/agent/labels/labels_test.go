package labels

import (
	"maps"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

func mock(t *testing.T) *gpumock.Mock {
	t.Helper()
	m, err := gpumock.New("dgxa100", gpumock.WithDriverVersion("580.95.05"), gpumock.WithCUDADriverVersion(13000))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestFromNVMLDGXA100(t *testing.T) {
	dp := config.DevicePlugin{MIGStrategy: "single", Sharing: config.Sharing{TimeSlicing: config.TimeSlicing{Replicas: 4}}}
	got, err := FromNVML(mock(t), dp, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		Count: "8", Memory: "40960", Family: "ampere", ComputeMajor: "8", ComputeMinor: "0",
		DriverVersionFull: "580.95.05", DriverVersionMajor: "580", DriverVersionMinor: "95", DriverVersionRev: "05",
		LegacyDriverMajor: "580", LegacyDriverMinor: "95", LegacyDriverRev: "05",
		RuntimeVersionFull: "13.0", RuntimeVersionMajor: "13", RuntimeVersionMinor: "0",
		LegacyRuntimeMajor: "13", LegacyRuntimeMinor: "0",
		MIGCapable: "true", MIGStrategy: "single", Replicas: "4", SharingStrategy: "time-slicing",
		Machine: "unknown", Mode: "unknown", MPSCapable: "false", // no sysfs here
	}
	product := got[Product]
	delete(got, Product)
	if !maps.Equal(got, want) {
		t.Fatalf("labels\n got %v\nwant %v", got, want)
	}
	if !strings.HasSuffix(product, "A100-SXM4-40GB-SHARED") || strings.Contains(product, " ") {
		t.Fatalf("product %q", product)
	}
	for k := range got {
		if !strings.HasPrefix(k, config.ManagedPrefix) {
			t.Errorf("label %s outside %s", k, config.ManagedPrefix)
		}
	}
}

// Every NVML call the labels make fails on its own once; the error must name the call.
func TestFromNVMLErrorsPerCall(t *testing.T) {
	fail := func(m *gpumock.Mock) *server.Device { return m.Devices[0].(*server.Device) }
	cases := map[string]func(m *gpumock.Mock){
		"DeviceGetCount": func(m *gpumock.Mock) {
			m.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
		},
		"SystemGetDriverVersion": func(m *gpumock.Mock) {
			m.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNINITIALIZED }
		},
		"SystemGetCudaDriverVersion": func(m *gpumock.Mock) {
			m.SystemGetCudaDriverVersionFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
		},
		"DeviceGetHandleByIndex": func(m *gpumock.Mock) {
			m.DeviceGetHandleByIndexFunc = func(int) (nvml.Device, nvml.Return) { return nil, nvml.ERROR_GPU_IS_LOST }
		},
		"DeviceGetName": func(m *gpumock.Mock) {
			fail(m).GetNameFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
		},
		"DeviceGetMemoryInfo": func(m *gpumock.Mock) {
			fail(m).GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_UNKNOWN }
		},
		"DeviceGetCudaComputeCapability": func(m *gpumock.Mock) {
			fail(m).GetCudaComputeCapabilityFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_UNKNOWN }
		},
		"DeviceGetMigMode": func(m *gpumock.Mock) {
			fail(m).GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_GPU_IS_LOST }
		},
	}
	for call, breakIt := range cases {
		t.Run(call, func(t *testing.T) {
			m := mock(t)
			breakIt(m)
			if _, err := FromNVML(m, config.DevicePlugin{}, t.TempDir()); err == nil || !strings.Contains(err.Error(), call) {
				t.Fatalf("want error naming %s, got %v", call, err)
			}
		})
	}
}

func TestMIGNotSupported(t *testing.T) {
	m := mock(t)
	for _, d := range m.Devices {
		d.(*server.Device).GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
	}
	got, err := FromNVML(m, config.DevicePlugin{}, t.TempDir())
	if err != nil || got[MIGCapable] != "false" || got[MIGStrategy] != "" || got[Replicas] != "1" || got[SharingStrategy] != "none" {
		t.Fatalf("%v %v", got, err)
	}
}

func TestFamily(t *testing.T) {
	for cc, want := range map[[2]int]string{{7, 0}: "volta", {7, 5}: "turing", {8, 0}: "ampere", {8, 9}: "ada-lovelace", {9, 0}: "hopper", {10, 0}: "blackwell", {2, 0}: "undefined"} {
		if got := family(cc[0], cc[1]); got != want {
			t.Errorf("%v: %s, want %s", cc, got, want)
		}
	}
}

// BenchmarkFromNVML reads this machine's own sysfs: its PCI bus is what a node's labels
// container scans for NVIDIA functions (vGPU) besides the GPUs' class attributes.
func BenchmarkFromNVML(b *testing.B) {
	m, _ := gpumock.New("dgxa100")
	dp := config.DevicePlugin{MIGStrategy: "none"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := FromNVML(m, dp, DefaultSysfs); err != nil {
			b.Fatal(err)
		}
	}
}
