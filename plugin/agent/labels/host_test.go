package labels

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib"
)

// sysfsWithGPUs lays out the mock's GPUs on a fake PCI bus, each with class and a config
// space of size bytes (64: what the kernel shows an unprivileged reader).
func sysfsWithGPUs(t *testing.T, lib nvml.Interface, classes []string, size int) string {
	t.Helper()
	sysfs := t.TempDir()
	n, _ := lib.DeviceGetCount()
	for i := range n {
		d, _ := lib.DeviceGetHandleByIndex(i)
		pci, _ := d.GetPciInfo()
		fn := filepath.Join(sysfs, pciDevices, gpulib.SysfsAddress(pci))
		if err := os.MkdirAll(fn, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, body := range map[string]string{"vendor": vendorNVIDIA + "\n", "class": classes[i%len(classes)] + "\n", "config": string(make([]byte, size))} {
			if err := os.WriteFile(filepath.Join(fn, name), []byte(body), 0o444); err != nil {
				t.Fatal(err)
			}
		}
	}
	return sysfs
}

// Unprivileged, the config space is cut at 64 bytes: NVML's virtualization mode decides.
func TestVGPUFromNVMLWhenConfigSpaceIsShort(t *testing.T) {
	for mode, want := range map[nvml.GpuVirtualizationMode]string{
		nvml.GPU_VIRTUALIZATION_MODE_VGPU:        "true",
		nvml.GPU_VIRTUALIZATION_MODE_PASSTHROUGH: "false",
		nvml.GPU_VIRTUALIZATION_MODE_NONE:        "false",
	} {
		m := mock(t)
		for _, d := range m.Devices {
			d.(*server.Device).GetVirtualizationModeFunc = func() (nvml.GpuVirtualizationMode, nvml.Return) { return mode, nvml.SUCCESS }
		}
		got, err := FromNVML(m, config.DevicePlugin{}, sysfsWithGPUs(t, m, []string{"0x030200"}, 64))
		if err != nil {
			t.Fatal(err)
		}
		if got[config.LabelVGPUPresent] != want || got[config.LabelVGPUHostDriverVer] != "" || got[Mode] != "compute" {
			t.Errorf("mode %d: vgpu.present=%q host driver %q gpu.mode=%q, want %s, none, compute", mode, got[config.LabelVGPUPresent], got[config.LabelVGPUHostDriverVer], got[Mode], want)
		}
	}
	// NVML cannot say either: no vGPU label rather than a guess.
	m := mock(t)
	for _, d := range m.Devices {
		d.(*server.Device).GetVirtualizationModeFunc = func() (nvml.GpuVirtualizationMode, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	}
	got, err := FromNVML(m, config.DevicePlugin{}, sysfsWithGPUs(t, m, []string{"0x030200"}, 64))
	if _, ok := got[config.LabelVGPUPresent]; err != nil || ok {
		t.Errorf("NVML failing: %v, vgpu.present set: %v", err, got)
	}
}

// GPUs of both classes make the mode unknown, as does a class that cannot be read.
func TestGPUModeMixedOrUnreadable(t *testing.T) {
	m := mock(t)
	got, err := FromNVML(m, config.DevicePlugin{}, sysfsWithGPUs(t, m, []string{"0x030200", "0x030000"}, 256))
	if err != nil || got[Mode] != "unknown" || got[config.LabelVGPUPresent] != "false" {
		t.Errorf("mixed classes: %v %v", got[Mode], err)
	}
	got, err = FromNVML(m, config.DevicePlugin{}, sysfsWithGPUs(t, m, []string{"0x030000"}, 256))
	if err != nil || got[Mode] != "graphics" {
		t.Errorf("VGA controllers: %v %v", got[Mode], err)
	}
	got, err = FromNVML(m, config.DevicePlugin{}, sysfsWithGPUs(t, m, []string{"garbage"}, 256))
	if err != nil || got[Mode] != "unknown" {
		t.Errorf("unreadable class: %v %v", got[Mode], err)
	}
}

// A capability list that loops, or a vGPU record of length 0, ends the walk.
func TestVendorCapabilityWalkEnds(t *testing.T) {
	cfg := make([]byte, pciConfigSize)
	cfg[pciStatus] = pciStatusCapList
	cfg[pciCapPointer] = 0x40
	cfg[0x40], cfg[0x41] = 0x01, 0x40 // points at itself
	if c := vendorCapability(cfg); c != nil {
		t.Errorf("looping list: %v", c)
	}
	if _, _, ok := hostDriver([]byte{0x09, 0, 12, 'V', 'F', 0x01, 0, 0, 0, 0, 0, 0}); ok {
		t.Error("a record of length 0 must not be walked forever nor read as the host driver")
	}
}
