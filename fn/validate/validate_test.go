package validate

import (
	"strings"
	"testing"
	"time"
)

// today pins the lifecycle checks to the date the matrix facts were reviewed.
var today = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

const base = `apiVersion: gpupolicy.dev/v1alpha1
kind: GPUPolicy
metadata:
  name: fleet
spec:
  kubernetesVersion: "1.34"
  driver: {version: "580.95.05"}
  cuda: {version: "12.8"}
`

func load(t *testing.T, doc string) Results {
	t.Helper()
	_, res := Load([]byte(doc), Options{Now: today})
	return res
}

func TestValidPolicyHasNoProblems(t *testing.T) {
	if res := load(t, base); len(res) != 0 {
		t.Fatalf("want no results, got:\n%s", res.Text("policy.yaml"))
	}
}

func TestResultsAreOrderedAndComplete(t *testing.T) {
	res := load(t, strings.Replace(base, `"580.95.05"`, `"535.54.03"`, 1)+"  exporter: {port: 80}\n")
	txt := res.Text("p.yaml")
	t.Log(txt)
	if !res.HasErrors() || !strings.HasPrefix(txt, "p.yaml: error: spec.exporter.port:") || !strings.Contains(txt, "warning: spec.driver.version: driver branch R535") {
		t.Fatalf("unexpected text:\n%s", txt)
	}
}
