package config

import (
	"strings"
	"testing"
)

// Product names become label values by gpu-feature-discovery's rule, cut to a valid value.
func TestProductLabel(t *testing.T) {
	for name, want := range map[string]string{
		"NVIDIA A100-SXM4-80GB":                "NVIDIA-A100-SXM4-80GB",
		"NVIDIA GeForce RTX 4090 (Laptop GPU)": "NVIDIA-GeForce-RTX-4090-Laptop-GPU", // GFD drops the parentheses
		"NVIDIA  H100 80GB HBM3":               "NVIDIA-H100-80GB-HBM3",
		"Tesla T4/PCIe":                        "Tesla-T4PCIe",
		" -NVIDIA L4- ":                        "NVIDIA-L4",
		"":                                     "",
		strings.Repeat("A", 70) + " B":         strings.Repeat("A", 63),
	} {
		if got := ProductLabel(name); got != want {
			t.Errorf("ProductLabel(%q) = %q, want %q", name, got, want)
		}
	}
}
