package diff

import (
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/fn/internal/fntest"
)

func object(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestFieldChanges: list items are matched by name or key, so inserting one item does not show
// every later one as changed; a list of scalars (args) is one value; an embedded YAML config is
// compared field by field.
func TestFieldChanges(t *testing.T) {
	base := object(t, `
kind: DaemonSet
metadata: {name: x, namespace: ns}
spec:
  updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 10%}}
  template:
    metadata: {annotations: {gpupolicy.dev/config-sha256: aaa}}
    spec:
      nodeSelector: {pool: a}
      containers:
      - name: main
        image: img:1
        args: [--interval, 15s]
        env: [{name: A, value: "1"}, {name: B, value: "2"}]
        resources: {limits: {memory: 256Mi}}
      volumes: [{name: cfg, configMap: {name: cm}}]
`)
	head := object(t, `
kind: DaemonSet
metadata: {name: x, namespace: ns}
spec:
  updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 10%}}
  template:
    metadata: {annotations: {gpupolicy.dev/config-sha256: aaa}}
    spec:
      nodeSelector: {pool: b}
      containers:
      - name: side
        image: side:1
      - name: main
        image: img:2
        args: [--interval, 30s]
        env: [{name: A0, value: "0"}, {name: A, value: "1"}, {name: B, value: "3"}]
        resources: {limits: {memory: 512Mi}}
      volumes: [{name: cfg, configMap: {name: cm}}, {name: extra, emptyDir: {}}]
`)
	var got []string
	for _, f := range fieldChanges(base, head) {
		got = append(got, f.Path+": "+f.From+" → "+f.To)
	}
	want := []string{
		"spec.template.spec.containers[name=main].args: --interval 15s → --interval 30s",
		"spec.template.spec.containers[name=main].env[name=A0].name:  → A0",
		"spec.template.spec.containers[name=main].env[name=A0].value:  → 0",
		"spec.template.spec.containers[name=main].env[name=B].value: 2 → 3",
		"spec.template.spec.containers[name=main].image: img:1 → img:2",
		"spec.template.spec.containers[name=main].resources.limits.memory: 256Mi → 512Mi",
		"spec.template.spec.containers[name=side].image:  → side:1",
		"spec.template.spec.containers[name=side].name:  → side",
		"spec.template.spec.nodeSelector.pool: a → b",
		"spec.template.spec.volumes[name=extra].name:  → extra",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	oc := changedObject("DaemonSet ns/x", base, head, nil)
	if want := "restarts the pods of DaemonSet ns/x on the nodes it selects (pool=b), at most 10% of them at a time"; oc.Effect != want {
		t.Errorf("effect %q, want %q", oc.Effect, want)
	}

	cmBase := object(t, "kind: ConfigMap\nmetadata: {name: cm}\ndata:\n  config.yaml: |\n    driver: {version: \"1\"}\n    interval: 30s\n")
	cmHead := object(t, "kind: ConfigMap\nmetadata: {name: cm}\ndata:\n  config.yaml: |\n    driver: {version: \"2\"}\n    interval: 30s\n")
	if fc := fieldChanges(cmBase, cmHead); len(fc) != 1 || fc[0] != (FieldChange{Path: "data[config.yaml].driver.version", From: "1", To: "2"}) {
		t.Errorf("embedded config: %+v", fc)
	}
}

// TestElideCommon: a long command line with one flag changed shows that flag, not two equal
// truncated prefixes.
func TestElideCommon(t *testing.T) {
	long := strings.Repeat("--flag value ", 12)
	a, b := elideCommon(long+"--containerd-version 1.7 --tail x", long+"--containerd-version 2.1 --tail x")
	if a != "… --containerd-version 1.7 --tail …" || b != "… --containerd-version 2.1 --tail …" {
		t.Errorf("got %q and %q", a, b)
	}
	if a, b := elideCommon("short", "other"); a != "short" || b != "other" {
		t.Errorf("short values changed: %q %q", a, b)
	}
}

// TestGoldenTimeSlicing is the change the report most needs to explain: time-slicing replicas
// move only two ConfigMaps, and through the config hash restart the pods of three DaemonSets.
func TestGoldenTimeSlicing(t *testing.T) {
	code, out, stderr := fntest.Call(Run, Options{Base: "testdata/base.yaml", Head: "testdata/head-time-slicing.yaml"})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	golden(t, "time-slicing.md", []byte(out))
	containsAll(t, out,
		"**Objects: 6 changed; restarts the pods of 3 DaemonSets (gpu-device-plugin, gpu-feature-discovery, gpu-node-agent) on the nodes they select;",
		"- Changed: DaemonSet gpu-system/gpu-node-agent — restarts the pods of DaemonSet gpu-system/gpu-node-agent on the nodes it selects (nvidia.com/gpu.present=true), at most 10% of them at a time. Only its config hash moved, because ConfigMap gpu-system/gpu-node-agent changed\n",
		"updateStrategy OnDelete: each node's pod is replaced only when it is deleted",
		"  - `data[config.yaml].sharing.timeSlicing.replicas`: `1` → `4`\n",
	)
}

// TestGoldenPresets diffs two shipped presets that differ in nearly everything: the report
// stays readable (the changes every object makes alike are listed once) and its Versions
// table shows containerd, gitops and enforce moving.
func TestGoldenPresets(t *testing.T) {
	code, out, stderr := fntest.Call(Run, Options{Base: "../../policies/preinstalled-containerd-1.7.yaml", Head: "../../policies/containerd-2-cdi.yaml", FailOn: "none"})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	golden(t, "presets.md", []byte(out))
	containsAll(t, out,
		"| containerd | `1.7` | `2.1` | **changed** |",
		"| gitops | `argocd` | `flux` | **changed** |",
		"| driver enforce | `branch` | `exact` | **changed** |",
		"- `metadata.labels[app.kubernetes.io/instance]`: `preinstalled-containerd-1-7` → `containerd-2-cdi` (30 objects)",
		"- Changed only alike (above): ClusterRole gpupolicy:gpu-system:gpu-discovery, ",
	)
	if n := strings.Count(out, "\n- Changed: "); n > 12 {
		t.Errorf("%d objects listed one by one: the ones that only change alike belong on one line", n)
	}
	if lead := strings.SplitN(out, "\n", 6)[4]; !strings.HasPrefix(lead, "**Moves kubernetesVersion 1.32 → 1.34, cuda 12.8 → 13.0, containerd 1.7 → 2.1") {
		t.Errorf("the summary must lead the comment, got %q", lead)
	}
}

// TestREADMEExcerpt keeps the README's diff example real: each of its lines is in the golden
// output it says it is an excerpt of.
func TestREADMEExcerpt(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	gold, err := os.ReadFile("testdata/time-slicing.md")
	if err != nil {
		t.Fatal(err)
	}
	const cmd = "$ gpupolicy-fn diff testdata/base.yaml testdata/head-time-slicing.yaml"
	_, block, ok := strings.Cut(string(readme), cmd)
	if !ok {
		t.Fatalf("README has no %q example", cmd)
	}
	block, _, _ = strings.Cut(block, "```")
	lines := strings.Split(block, "\n")[1:]
	if len(lines) < 10 {
		t.Fatalf("README example too short: %q", block)
	}
	for _, l := range lines {
		if l != "" && l != "..." && !strings.Contains(string(gold), l+"\n") {
			t.Errorf("README diff line is not in testdata/time-slicing.md: %q", l)
		}
	}
}

// BenchmarkDiffPresets is the largest change the shipped presets make: two policies rendered
// and compared field by field (numbers in BENCHMARKS.md).
func BenchmarkDiffPresets(b *testing.B) {
	for b.Loop() {
		code, _, stderr := fntest.Call(Run, Options{Base: "../../policies/preinstalled-containerd-1.7.yaml", Head: "../../policies/containerd-2-cdi.yaml", FailOn: "none"})
		if code != 0 {
			b.Fatal(stderr)
		}
	}
}
