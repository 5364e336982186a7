package config

import (
	"slices"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/validate/matrix"
)

func TestContainerdConfigVersion(t *testing.T) {
	for major, want := range map[int]int{1: 2, 2: 3, 3: 3} {
		if got := ContainerdConfigVersion(major); got != want {
			t.Errorf("containerd %d: config version %d, want %d", major, got, want)
		}
	}
	if CRIRuntimePlugin(2) != "io.containerd.grpc.v1.cri" || CRIRuntimePlugin(3) != "io.containerd.cri.v1.runtime" {
		t.Errorf("CRI runtime plugins: %s, %s", CRIRuntimePlugin(2), CRIRuntimePlugin(3))
	}
}

// ContainerdMinors is matrix.yaml's containerd table (the node programs do not ship it).
func TestContainerdMinorsMatchMatrix(t *testing.T) {
	if got, want := ContainerdMinors, matrix.Default().ContainerdMinors(); !slices.Equal(got, want) {
		t.Fatalf("plugin/config.ContainerdMinors = %v, fn/validate/matrix/matrix.yaml lists %v: keep them equal", got, want)
	}
}
