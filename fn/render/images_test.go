package render

import (
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
)

func TestMirror(t *testing.T) {
	for _, tc := range []struct{ registry, ref, want string }{
		{"", "nvcr.io/nvidia/driver:580.95.05-ubuntu24.04", "nvcr.io/nvidia/driver:580.95.05-ubuntu24.04"},
		{"mirror.example.com", "nvcr.io/nvidia/driver:1", "mirror.example.com/nvidia/driver:1"},
		{"mirror.example.com:5000/gpu/", "ghcr.io/gpupolicy/gpupolicy:v0.1.0", "mirror.example.com:5000/gpu/gpupolicy/gpupolicy:v0.1.0"},
		{"m.local", "localhost:5000/x/y@sha256:abc", "m.local/x/y@sha256:abc"},
		{"m.local", "busybox:1.36", "m.local/library/busybox:1.36"},
		{"m.local", "bitnami/kubectl:1.30", "m.local/bitnami/kubectl:1.30"},
	} {
		if got := Mirror(tc.registry, tc.ref); got != tc.want {
			t.Errorf("Mirror(%q, %q) = %q, want %q", tc.registry, tc.ref, got, tc.want)
		}
	}
}

func TestCheckPinned(t *testing.T) {
	for ref, pinned := range map[string]bool{
		"ghcr.io/gpupolicy/gpupolicy:v0.1.0":          true,
		"ghcr.io/gpupolicy/gpupolicy@sha256:0123":     true,
		"localhost:5000/gpupolicy":                    false,
		"ghcr.io/gpupolicy/gpupolicy":                 false,
		"ghcr.io/gpupolicy/gpupolicy:latest":          false,
		"ghcr.io/gpupolicy/gpupolicy:latest@sha256:0": true,
	} {
		if got := checkPinned(ref) == ""; got != pinned {
			t.Errorf("%s: pinned = %v, want %v (%s)", ref, got, pinned, checkPinned(ref))
		}
	}
}

func TestResolveImagesErrors(t *testing.T) {
	s := &v1alpha1.Spec{Driver: v1alpha1.Driver{Image: "nvcr.io/nvidia/driver:580"}, Toolkit: v1alpha1.Toolkit{Image: "nvcr.io/nvidia/k8s/container-toolkit"},
		Images: v1alpha1.Images{GPUPolicy: "ghcr.io/gpupolicy/gpupolicy"}}
	_, err := resolveImages(s)
	fe, ok := err.(v1alpha1.FieldErrors)
	if !ok || len(fe) != 2 || fe[0].Field != "spec.images.gpupolicy" || fe[1].Field != "spec.driver.image" {
		t.Fatalf("want errors on spec.images.gpupolicy and spec.driver.image, got %v", err)
	}
}

// TestDriverImageTagByTheAgentsRule: the driver image tag is the version as plugin/config's
// rule spells it; a spelling the rule refuses ("580.95.5", no such tag) is an error on
// spec.driver.version, never an image reference.
func TestDriverImageTagByTheAgentsRule(t *testing.T) {
	s := &v1alpha1.Spec{Driver: v1alpha1.Driver{Source: v1alpha1.SourceContainer, Image: "nvcr.io/nvidia/driver", Version: "580.95.05", OS: "ubuntu24.04"},
		Toolkit: v1alpha1.Toolkit{Image: "nvcr.io/nvidia/k8s/container-toolkit"}, Images: v1alpha1.Images{GPUPolicy: "ghcr.io/gpupolicy/gpupolicy:v1"}}
	im, err := resolveImages(s)
	if err != nil || im.driver != "nvcr.io/nvidia/driver:580.95.05-ubuntu24.04" {
		t.Fatalf("driver image %q, %v", im.driver, err)
	}
	s.Driver.Version = "580.95.5"
	_, err = resolveImages(s)
	fe, ok := err.(v1alpha1.FieldErrors)
	if !ok || len(fe) != 1 || fe[0].Field != "spec.driver.version" || !strings.Contains(fe[0].Detail, `write "580.95.05"`) {
		t.Fatalf("want one error on spec.driver.version naming 580.95.05, got %v", err)
	}
}
