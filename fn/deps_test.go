package main

import (
	"os/exec"
	"strings"
	"testing"
)

// gpupolicy-fn links no client-go: its packages register schemes, feature gates and the exec
// plugin's tables at initialisation, which every KRM call would pay (about 0.5 ms and 2 MiB,
// BENCHMARKS.md "Bring-up in seconds"), though only doctor reads a cluster, through
// fn/internal/kubeclient. Tests may still use client-go's fakes.
func TestLinksNoClientGo(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "k8s.io/client-go/") {
			t.Errorf("gpupolicy-fn links %s; keep client-go out of non-test code (see fn/internal/kubeclient)", pkg)
		}
	}
}
