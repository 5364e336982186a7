package main

import (
	"os/exec"
	"strings"
	"testing"
)

// gpupolicy-fn links neither client-go nor the KRM functions SDK: their packages initialise
// at every process start, which every KRM call would pay, though the function uses none of
// it (BENCHMARKS.md "Bring-up in seconds"). client-go registers schemes, feature gates and
// the exec plugin's tables (about 0.5 ms and 2 MiB; only doctor reads a cluster, through
// fn/internal/kubeclient); the SDK brings kyaml, kube-openapi, gnostic and protobuf (fn/krm
// reads the ResourceList with yaml.v3). Tests may still use both, as kpt's side of the
// contract and client-go's fakes.
func TestLinksNoClientGoOrSDK(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for prefix, instead := range map[string]string{
			"k8s.io/client-go/":                 "see fn/internal/kubeclient",
			"github.com/kptdev/":                "fn/krm reads the ResourceList itself",
			"sigs.k8s.io/kustomize/":            "fn/krm reads the ResourceList itself",
			"google.golang.org/protobuf/":       "it came with kyaml's OpenAPI",
			"github.com/google/gnostic-models/": "it came with kyaml's OpenAPI",
		} {
			if strings.HasPrefix(pkg, prefix) {
				t.Errorf("gpupolicy-fn links %s; keep %s* out of non-test code (%s)", pkg, prefix, instead)
			}
		}
	}
}
