package gpulib

import (
	"errors"
	"os"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

func TestOpenMissingLibrary(t *testing.T) {
	for _, dir := range []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"} {
		if _, err := os.Stat(dir + "/libnvidia-ml.so.1"); err == nil {
			t.Skip("libnvidia-ml.so.1 is installed here")
		}
	}
	lib, err := Open("")
	if !errors.Is(err, ErrLibraryNotFound) || lib != nil {
		t.Fatalf("Open without the library: %v, %v", lib, err)
	}
}

func TestOpenMockVersions(t *testing.T) {
	lib, err := Open("dgxa100", gpumock.WithDriverVersion("580.95.05"), gpumock.WithCUDADriverVersion(13000))
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Shutdown()
	v, ret := lib.SystemGetDriverVersion()
	c, ret2 := lib.SystemGetCudaDriverVersion()
	if ret != nvml.SUCCESS || ret2 != nvml.SUCCESS || v != "580.95.05" || CUDAVersion(c) != "13.0" {
		t.Fatalf("driver %q cuda %d", v, c)
	}
	if _, err := Open("nope"); err == nil {
		t.Fatal("unknown mock accepted")
	}
}

func TestCUDAVersion(t *testing.T) {
	for s, v := range map[string]int{"12.8": 12080, "13.0": 13000, "11.4": 11040} {
		got, err := ParseCUDAVersion(s)
		if err != nil || got != v || CUDAVersion(v) != s {
			t.Errorf("%s <-> %d: got %d %v %s", s, v, got, err, CUDAVersion(v))
		}
	}
	if _, err := ParseCUDAVersion("twelve"); err == nil {
		t.Error("bad version accepted")
	}
}
