package krm_test

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kptdev/krm-functions-sdk/go/fn"

	"github.com/gpupolicy/gpupolicy/fn/krm"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

var opts = validate.Options{Now: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}

func policy(t *testing.T) string {
	b, err := os.ReadFile("../render/testdata/default/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func indent(s, by string) string {
	return by + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+by)
}

func run(t *testing.T, in string) (*fn.ResourceList, int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := krm.Run(strings.NewReader(in), &out, &errb, opts)
	rl, err := fn.ParseResourceList(out.Bytes())
	if err != nil {
		t.Fatalf("output is not a ResourceList: %v\n%s\nstderr: %s", err, out.String(), errb.String())
	}
	return rl, code, errb.String()
}

const passthrough = `  - apiVersion: v1
    kind: ConfigMap
    metadata:
      name: unrelated
      namespace: default
    data: {a: b}
`

// TestGeneratorFunctionConfig is how kustomize calls a generator: the policy (with the
// function annotation) is the functionConfig; items pass through; the policy never appears.
func TestGeneratorFunctionConfig(t *testing.T) {
	p := strings.Replace(policy(t), "  name: fleet\n", "  name: fleet\n  annotations:\n    config.kubernetes.io/function: |\n      exec:\n        path: /bin/gpupolicy-fn\n    config.kubernetes.io/local-config: \"true\"\n", 1)
	in := "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n" + passthrough + "functionConfig:\n" + indent(p, "  ") + "\n"
	rl, code, stderr := run(t, in)
	if code != 0 {
		t.Fatalf("exit %d: %s %v", code, stderr, rl.Results)
	}
	kinds := map[string]int{}
	for _, it := range rl.Items {
		if it.GetKind() == "GPUPolicy" {
			t.Fatal("the GPUPolicy must never appear in the output")
		}
		kinds[it.GetKind()]++
	}
	if kinds["DaemonSet"] != 7 || kinds["ConfigMap"] != 4 || kinds["Namespace"] != 1 {
		t.Fatalf("unexpected items: %v", kinds)
	}
	// kpt writes each object where `render -o` would.
	for _, it := range rl.Items {
		if it.GetKind() == "DaemonSet" && it.GetName() == "gpu-driver" {
			if p := it.GetAnnotation("internal.config.kubernetes.io/path"); p != "01-driver/daemonset-gpu-driver.yaml" {
				t.Errorf("gpu-driver path annotation = %q", p)
			}
		}
	}
	// Input items first, then the rendered objects in stage order.
	if rl.Items[0].GetName() != "unrelated" || rl.Items[1].GetKind() != "Namespace" || rl.Items[len(rl.Items)-1].GetKind() != "PrometheusRule" {
		t.Fatalf("order: %s, %s ... %s", rl.Items[0].ShortString(), rl.Items[1].ShortString(), rl.Items[len(rl.Items)-1].ShortString())
	}
	for _, r := range rl.Results {
		if r.Severity == fn.Error {
			t.Fatalf("unexpected error result %v", r)
		}
	}
}

// TestPolicyAsItem is `kpt fn eval`: the policy is an item of the package.
func TestPolicyAsItem(t *testing.T) {
	in := "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n" + indent("- "+strings.ReplaceAll(policy(t), "\n", "\n  "), "  ") + "\n"
	rl, code, stderr := run(t, in)
	if code != 0 {
		t.Fatalf("exit %d: %s %v", code, stderr, rl.Results)
	}
	if len(rl.Items) != 30 { // 26 stack objects + discovery: ServiceAccount, ClusterRole, ClusterRoleBinding, DaemonSet
		t.Fatalf("got %d items", len(rl.Items))
	}
}

// TestErrorsBecomeResults: a broken policy gives error results with the field path, the
// resourceRef and the file, exit 1 and no items at all.
func TestErrorsBecomeResults(t *testing.T) {
	bad := strings.Replace(policy(t), "  name: fleet\n", "  name: fleet\n  annotations:\n    internal.config.kubernetes.io/path: gpu/policy.yaml\n", 1)
	bad = strings.Replace(bad, "  cuda:\n", "  exporter:\n    prot: 9400\n  cuda:\n", 1)
	bad = strings.Replace(bad, `gitops`, `gitops`, 1)
	in := "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n" + passthrough + "functionConfig:\n" + indent(bad, "  ") + "\n"
	rl, code, _ := run(t, in)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if len(rl.Items) != 0 {
		t.Fatalf("no objects may be output on error, got %d", len(rl.Items))
	}
	var found bool
	for _, r := range rl.Results {
		if r.Severity == fn.Error && r.Field != nil && r.Field.Path == "spec.exporter.prot" {
			found = true
			if r.ResourceRef == nil || r.ResourceRef.Kind != "GPUPolicy" || r.ResourceRef.Name != "fleet" {
				t.Errorf("resourceRef = %+v", r.ResourceRef)
			}
			if r.File == nil || r.File.Path != "gpu/policy.yaml" {
				t.Errorf("file = %+v", r.File)
			}
			if !strings.Contains(r.Message, "port") {
				t.Errorf("message should suggest the right field: %s", r.Message)
			}
		}
	}
	if !found {
		t.Fatalf("no error result for spec.exporter.prot: %v", rl.Results)
	}
}

func TestNoPolicy(t *testing.T) {
	rl, code, _ := run(t, "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n"+passthrough)
	if code != 1 || len(rl.Results) != 1 || !strings.Contains(rl.Results[0].Message, "no GPUPolicy") {
		t.Fatalf("exit %d, results %v", code, rl.Results)
	}
}

func TestTwoPolicies(t *testing.T) {
	item := indent("- "+strings.ReplaceAll(policy(t), "\n", "\n  "), "  ")
	rl, code, _ := run(t, "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n"+item+"\n"+strings.Replace(item, "name: fleet", "name: other", 1)+"\n")
	if code != 1 || len(rl.Items) != 0 || !strings.Contains(rl.Results[0].Message, "2 GPUPolicy") {
		t.Fatalf("exit %d, results %v", code, rl.Results)
	}
}

func TestWrongFunctionConfig(t *testing.T) {
	rl, code, _ := run(t, "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: cfg}\n")
	if code != 1 || !strings.Contains(rl.Results[0].Message, "not a GPUPolicy") {
		t.Fatalf("exit %d, results %v", code, rl.Results)
	}
}

// TestNotAResourceList: input that is not one ResourceList is refused with what it holds
// instead, nothing on stdout.
func TestNotAResourceList(t *testing.T) {
	const head = "kind: ResourceList\n"
	for in, want := range map[string]string{
		"kind: Deployment\n":     `its kind is "Deployment", not ResourceList`,
		"":                       "it holds no YAML document",
		"- a\n":                  "the document is a list, not a mapping with kind: ResourceList",
		head + "---\n" + head:    "more than one YAML document",
		head + "items: {a: b}\n": "items is a mapping, not a list of objects",
		head + "items: [3]\n":    `items[0] is the scalar "3", not an object`,
		head + "items: []\nfunctionConfig: [a]\n":    "functionConfig is a list, not an object",
		head + "items: []\nfunctionConfig: {a: [}\n": "yaml: line ",
	} {
		var out, errb bytes.Buffer
		code := krm.Run(strings.NewReader(in), &out, &errb, opts)
		if code != 1 || out.Len() != 0 || !strings.Contains(errb.String(), "stdin is not a KRM ResourceList") || !strings.Contains(errb.String(), want) {
			t.Errorf("%q: exit %d, stdout %d bytes, stderr %q; want 1, nothing, %q", in, code, out.Len(), errb.String(), want)
		}
	}
}

// TestEarlierResultsKept: results an earlier function of a kpt pipeline left stay, before
// this function's, as a block list (the encoder's style for an empty list is flow).
func TestEarlierResultsKept(t *testing.T) {
	in := "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\nfunctionConfig:\n" + indent(policy(t), "  ") +
		"\nresults:\n- message: checked by an earlier function\n  severity: info\n"
	var out, errb bytes.Buffer
	if code := krm.Run(strings.NewReader(in), &out, &errb, opts); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "\nresults:\n- message: checked by an earlier function\n  severity: info\n") {
		t.Fatalf("earlier result not kept as it came:\n%s", out.String()[max(0, out.Len()-400):])
	}
	rl, err := fn.ParseResourceList(out.Bytes())
	if err != nil || len(rl.Results) == 0 || rl.Results[0].Message != "checked by an earlier function" {
		t.Fatalf("results %v, %v", rl.Results, err)
	}
}

// TestLinesCountFromThePolicy: a decode error names the line in the policy itself, wherever
// the policy sits in the ResourceList (functionConfig after items, or an item).
func TestLinesCountFromThePolicy(t *testing.T) {
	p := policy(t)
	bad := strings.Replace(p, "  cuda:\n", "  exporter:\n    prot: 9400\n  cuda:\n", 1)
	line := strings.Count(bad[:strings.Index(bad, "    prot:")], "\n") + 1
	want := fmt.Sprintf("at line %d;", line)
	for name, in := range map[string]string{
		"functionConfig": "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n" + passthrough + "functionConfig:\n" + indent(bad, "  ") + "\n",
		"item":           "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n" + passthrough + indent("- "+strings.ReplaceAll(bad, "\n", "\n  "), "  ") + "\n",
	} {
		rl, code, _ := run(t, in)
		if code != 1 || len(rl.Results) == 0 || !strings.Contains(rl.Results[0].Message, want) {
			t.Errorf("as %s: exit %d, results %v; want a message with %q", name, code, rl.Results, want)
		}
	}
}

// TestKustomizeInput replays what kustomize really sends: the policy twice (functionConfig
// and item). It is one policy, rendered once, and absent from the output.
func TestKustomizeInput(t *testing.T) {
	in, err := os.ReadFile("testdata/kustomize-input.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rl, code, stderr := run(t, string(in))
	if code != 0 {
		t.Fatalf("exit %d: %s %v", code, stderr, rl.Results)
	}
	daemonSets := 0
	for _, it := range rl.Items {
		if it.GetKind() == "GPUPolicy" {
			t.Fatal("the GPUPolicy must not be in the output")
		}
		if it.GetKind() == "DaemonSet" {
			daemonSets++
		}
	}
	if daemonSets != 8 { // discovery, agent, driver, toolkit, 2 device plugins, feature discovery, exporter
		t.Fatalf("%d DaemonSets", daemonSets)
	}
}

// BenchmarkKRM is one function call as kustomize makes it, in process (parse, validate,
// render, serialize).
func BenchmarkKRM(b *testing.B) {
	in, err := os.ReadFile("testdata/kustomize-input.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		var out, errb bytes.Buffer
		if code := krm.Run(bytes.NewReader(in), &out, &errb, opts); code != 0 {
			b.Fatal(errb.String())
		}
	}
}

// TestInputLimits: the KRM path has render's limits: stdin over MaxResourceListBytes or not
// UTF-8 is refused before it is parsed, a policy over MaxPolicyBytes is an error result
// naming it, and the entry limits hold (the decoder's). Before, a 19 MB policy took 116 s.
func TestInputLimits(t *testing.T) {
	head := "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n" + passthrough + "functionConfig:\n"
	fc := indent(policy(t), "  ") + "\n"
	for _, c := range []struct {
		name, in, stderr string
	}{
		{"stdin too large", head + fc + strings.Repeat("# pad\n", 3<<20), "the ResourceList on stdin is over the 16 MiB limit (it is more than that; see Limits in the GPUPolicy reference): it holds the GPUPolicy (a few KiB) and every item the orchestrator passes through, the other resources of the kustomization or kpt package: generate the GPU stack in a kustomization or package of its own, so that only the policy reaches the function"},
		{"latin-1", strings.Replace(head+fc, "name: fleet", "name: fleet\n    labels: {owner: Jos\xe9}", 1), "the ResourceList on stdin is not UTF-8: line 15, column 24"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := krm.Run(strings.NewReader(c.in), &out, &errb, opts); code != 1 || !strings.Contains(errb.String(), c.stderr) || out.Len() != 0 {
				t.Fatalf("exit %d, stdout %d bytes, stderr %q; want 1, nothing, %q", code, out.Len(), errb.String(), c.stderr)
			}
		})
	}
	secrets := strings.Repeat("    - "+strings.Repeat("s", 60)+"\n", 20_000)
	big := strings.Replace(fc, "  spec:\n", "  spec:\n    imagePullSecrets:\n"+secrets, 1)
	rl, code, _ := run(t, head+big)
	if code != 1 || len(rl.Items) != 0 || len(rl.Results) == 0 || !strings.Contains(rl.Results[0].Message, "the GPUPolicy is over the 1 MiB limit (it is 1.") ||
		rl.Results[0].ResourceRef == nil {
		t.Fatalf("exit %d, %d items, results %v", code, len(rl.Items), rl.Results)
	}
	many := strings.Replace(fc, "  spec:\n", "  spec:\n    imagePullSecrets:\n"+strings.Repeat("    - s\n", 40), 1)
	rl, code, _ = run(t, head+many)
	if code != 1 || len(rl.Results) == 0 || rl.Results[0].Field == nil || rl.Results[0].Field.Path != "spec.imagePullSecrets" {
		t.Fatalf("40 pull secrets: exit %d, results %v", code, rl.Results)
	}
}
