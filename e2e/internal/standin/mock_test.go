package standin

import (
	"slices"
	"testing"
)

// TestMockGPUUUIDsAreStable: the nvidia-ctk stand-in's CDI spec is generated in one process
// (the agent's toolkit stage) and the device plugin allocates "nvidia.com/gpu=<uuid>" from its
// own --nvml-mock dgxa100 in another, so two enumerations of the mock must name the same GPUs,
// as two boots of a real node do.
func TestMockGPUUUIDsAreStable(t *testing.T) {
	a, err := enumerateMock()
	if err != nil {
		t.Fatal(err)
	}
	b, err := enumerateMock()
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 8 {
		t.Fatalf("dgxa100 has %d GPUs, want 8", len(a))
	}
	if !slices.Equal(a, b) {
		t.Fatalf("two dgxa100 mocks name different GPUs (%s vs %s): the CDI names the nvidia-ctk stand-in writes cannot match the device plugin's. "+
			"Fix in plugin/gpulib/gpumock.New: derive each GPU's UUID from its index, e.g. "+
			`d.UUID = "GPU-" + uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "gpumock/%%s/%%d", name, i)).String()`, a[0], b[0])
	}
}
