package gpulib

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestBusID(t *testing.T) {
	var p nvml.PciInfo
	for i, c := range "00000000:07:00.0" {
		p.BusId[i] = int8(c)
	}
	p.BusId[17] = 'x' // after the terminating NUL: not part of the id
	if got := BusID(p); got != "00000000:07:00.0" {
		t.Errorf("BusID = %q", got)
	}
	full := nvml.PciInfo{}
	for i := range full.BusId {
		full.BusId[i] = '0'
	}
	if got := BusID(full); len(got) != len(full.BusId) {
		t.Errorf("an id without NUL must keep the whole array: %d bytes", len(got))
	}
}

func TestSysfsAddress(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:07:00.0": "0000:07:00.0", // NVML's 8-digit domain
		"00000001:B3:00.0": "0001:b3:00.0",
		"0000:3B:00.0":     "0000:3b:00.0", // already the kernel's form
	} {
		var p nvml.PciInfo
		for i, c := range in {
			p.BusId[i] = int8(c)
		}
		if got := SysfsAddress(p); got != want {
			t.Errorf("SysfsAddress(%q) = %q, want %q", in, got, want)
		}
	}
}
