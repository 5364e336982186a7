package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kwokStageConfig reads each set's kustomization.yaml and concatenates only the files it
// lists; the test data kwok keeps next to its stages stays out.
func TestKwokStageConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("node/fast/kustomization.yaml", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- node-initialize.yaml\n")
	write("node/fast/node-initialize.yaml", "kind: Stage\nmetadata: {name: node-initialize}\n")
	write("node/fast/testdata/in.yaml", "kind: Node\n")
	write("pod/fast/kustomization.yaml", "resources:\n- a.yaml\n- b.yaml\nnamePrefix: x\n")
	write("pod/fast/a.yaml", "kind: Stage\nmetadata: {name: a}\n")
	write("pod/fast/b.yaml", "kind: Stage\nmetadata: {name: b}\n")
	out := filepath.Join(dir, "out.yaml")
	if err := kwokStageConfig(dir, out, nil, "node/fast", "pod/fast"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	if n := strings.Count(got, "kind: Stage"); n != 3 || strings.Contains(got, "kind: Node") {
		t.Errorf("stage config:\n%s", got)
	}
	if err := kwokStageConfig(dir, out, nil, "node/missing"); err == nil {
		t.Error("missing stage set accepted")
	}
}

// holdReadiness splits kwok v0.8.0's own pod-ready stage: the named containers' pods run with
// Ready, ContainersReady and their containers' ready false, every other pod as before.
func TestHoldReadiness(t *testing.T) {
	orig, err := os.ReadFile(filepath.Join("testdata", "kwok-v0.8.0-pod-ready.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs, err := holdReadiness([]string{"other: stage", strings.TrimSpace(string(orig))}, []string{"driver-validator"})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 3 || docs[0] != "other: stage" {
		t.Fatalf("want the other stage, pod-ready and the held copy, got %d docs", len(docs))
	}
	others, held := docs[1], docs[2]
	for _, want := range []string{"name: pod-ready\n", "- key: '.spec.containers.[].name'\n      operator: 'NotIn'\n      values:\n      - \"driver-validator\"\n", "status: \"True\"\n        type: Ready\n"} {
		if !strings.Contains(others, want) {
			t.Errorf("pod-ready lacks %q:\n%s", want, others)
		}
	}
	for _, want := range []string{"name: pod-running-unready\n", "operator: 'In'\n      values:\n      - \"driver-validator\"\n",
		"status: \"False\"\n        type: Ready\n", "status: \"False\"\n        type: ContainersReady\n", "ready: false\n", "phase: Running"} {
		if !strings.Contains(held, want) {
			t.Errorf("held stage lacks %q:\n%s", want, held)
		}
	}
	if strings.Contains(held, `select( .type == "Ready" )`) {
		t.Errorf("held stage still selects on Ready (it would never match its own output's phase):\n%s", held)
	}
	if _, err := holdReadiness([]string{"kind: Stage\nmetadata: {name: pod-ready}\n"}, []string{"x"}); err == nil {
		t.Error("a pod-ready stage of another shape was accepted")
	}
}
