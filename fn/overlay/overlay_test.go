package overlay

import (
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v3"

	"github.com/gpupolicy/gpupolicy/fn/internal/fntest"
	"github.com/gpupolicy/gpupolicy/internal/peer"
)

// base is the GPUPolicy every case patches: maps, lists of named items, lists without names,
// scalars of each type.
const base = `apiVersion: gpupolicy.dev/v1alpha1
kind: GPUPolicy
metadata:
  name: fleet
  labels: {team: gpu}
spec:
  kubernetesVersion: "1.34"
  driver:
    source: container
    version: "580.95.05"
    upgrade:
      maxUnavailable: 1
      drain: {enable: true, timeoutSeconds: 300}
  tolerations:
  - key: nvidia.com/gpu
    operator: Exists
  devicePlugin:
    sharing:
      timeSlicing:
        replicas: 4
  nodePools:
  - name: a
    nodeSelector: {pool: a}
    mig:
      layouts:
        x:
        - devices: all
          profiles: {"1g.10gb": 7}
  - name: b
    nodeSelector: {pool: b}
`

// overlayCases are patches as users write them; each is built by real kustomize and by
// overlay, and the two GPUPolicies must be equal. The comment says what the case pins down.
var overlayCases = []struct {
	name  string
	kust  string            // the overlay's kustomization.yaml (resources: [../base] is added)
	files map[string]string // other files of the overlay
}{
	{name: "maps merge, scalars replace", kust: `
patches:
- patch: |
    apiVersion: gpupolicy.dev/v1alpha1
    kind: GPUPolicy
    metadata: {name: fleet}
    spec:
      driver: {version: "580.105.08", upgrade: {drain: {timeoutSeconds: 600}}}
`},
	{name: "null deletes a key", kust: `
patches:
- patch: |
    apiVersion: gpupolicy.dev/v1alpha1
    kind: GPUPolicy
    metadata: {name: fleet}
    spec:
      driver: {upgrade: null}
      devicePlugin: {sharing: {timeSlicing: {replicas: ~}}}
`},
	{name: "a list of named items is replaced whole, not merged by name", kust: `
patches:
- patch: |
    apiVersion: gpupolicy.dev/v1alpha1
    kind: GPUPolicy
    metadata: {name: fleet}
    spec:
      nodePools:
      - name: c
        nodeSelector: {pool: c}
      - name: a
        nodeSelector: {other: x}
`},
	{name: "a new map with nulls inside drops them", kust: `
patches:
- patch: |
    apiVersion: gpupolicy.dev/v1alpha1
    kind: GPUPolicy
    metadata: {name: fleet}
    spec:
      exporter: {enabled: true, serviceMonitor: null, port: 9400}
`},
	{name: "$patch: replace and delete on mappings", kust: `
patches:
- patch: |
    apiVersion: gpupolicy.dev/v1alpha1
    kind: GPUPolicy
    metadata: {name: fleet}
    spec:
      driver:
        $patch: replace
        source: preinstalled
        version: "570.1"
      devicePlugin:
        sharing: {$patch: delete}
`},
	{name: "patch from a file, with target and another name in the patch", files: map[string]string{
		"p.yaml": `apiVersion: gpupolicy.dev/v1alpha1
kind: GPUPolicy
metadata: {name: ignored}
spec: {cuda: {version: "12.8"}}
`}, kust: `
patches:
- path: p.yaml
  target: {kind: GPUPolicy, name: "fl.*"}
`},
	{name: "JSON 6902 ops", kust: `
patches:
- target: {group: gpupolicy.dev, version: v1alpha1, kind: GPUPolicy, name: fleet}
  patch: |
    - op: add
      path: /spec/nodePools/-
      value: {name: z, nodeSelector: {pool: z}}
    - op: add
      path: /spec/nodePools/0
      value: {name: first}
    - op: replace
      path: /spec/driver/version
      value: "580.1"
    - op: remove
      path: /spec/tolerations/0
    - op: copy
      from: /spec/nodePools/1/nodeSelector
      path: /spec/nodePools/0/nodeSelector
    - op: move
      from: /metadata/labels/team
      path: /metadata/labels/owner
    - op: test
      path: /spec/kubernetesVersion
      value: "1.34"
    - op: add
      path: /spec/nodePools/1/mig/layouts/x~1y
      value: [{devices: [0], profiles: {"7g.80gb": 1}}]
`},
	{name: "patchesStrategicMerge and patchesJson6902 in kustomize's order", files: map[string]string{
		"smp.yaml": `apiVersion: gpupolicy.dev/v1alpha1
kind: GPUPolicy
metadata: {name: fleet}
spec: {driver: {version: "1"}}
`,
		"ops.yaml": `- op: replace
  path: /spec/driver/version
  value: "3"
`}, kust: `
patchesStrategicMerge:
- smp.yaml
- |-
  apiVersion: gpupolicy.dev/v1alpha1
  kind: GPUPolicy
  metadata: {name: fleet}
  spec: {driver: {source: preinstalled}}
patchesJson6902:
- target: {kind: GPUPolicy, name: fleet}
  path: ops.yaml
patches:
- patch: |
    apiVersion: gpupolicy.dev/v1alpha1
    kind: GPUPolicy
    metadata: {name: fleet}
    spec: {driver: {version: "2"}}
`},
	{name: "a patch level in between, and a scalar replaced by a list", files: map[string]string{
		"mid/kustomization.yaml": `resources: [../../base]
patches:
- patch: |
    apiVersion: gpupolicy.dev/v1alpha1
    kind: GPUPolicy
    metadata: {name: fleet}
    spec: {driver: {version: "mid"}, nodePools: []}
`}, kust: `
patches:
- patch: |
    apiVersion: gpupolicy.dev/v1alpha1
    kind: GPUPolicy
    metadata: {name: fleet}
    spec: {driver: {version: "top"}, tolerations: null}
`},
}

// TestOverlayMatchesKustomize is the differential test: for every case, the GPUPolicy
// overlay builds equals the one real kustomize builds (decoded, so key order and quoting do not
// count).
func TestOverlayMatchesKustomize(t *testing.T) {
	kustomize := peer.Tool(t, "KUSTOMIZE", "kustomize", "v5.8.2", "kustomize")
	for _, tc := range overlayCases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, "base/gpupolicy.yaml", base)
			write(t, dir, "base/kustomization.yaml", "resources: [gpupolicy.yaml]\n")
			kust := "resources: [../base]\n" + tc.kust
			for name, content := range tc.files {
				write(t, dir, "ov/"+name, content)
				if strings.HasPrefix(name, "mid/") {
					kust = "resources: [mid]\n" + tc.kust
				}
			}
			write(t, dir, "ov/kustomization.yaml", kust)
			want, err := exec.Command(kustomize, "build", filepath.Join(dir, "ov")).CombinedOutput()
			if err != nil {
				t.Fatalf("kustomize build: %v\n%s", err, want)
			}
			got, err := Policy(filepath.Join(dir, "ov"), NewCache())
			if err != nil {
				t.Fatalf("overlay: %v", err)
			}
			if g, w := decode(t, got), decode(t, want); !reflect.DeepEqual(g, w) {
				t.Errorf("overlay and kustomize differ\n--- overlay:\n%s\n--- kustomize:\n%s", got, want)
			}
		})
	}
}

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	fntest.WriteFiles(t, dir, map[string]string{name: content})
}

func decode(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	return v
}

// TestOverlayRefusals: what overlay does not reproduce, or kustomize itself refuses, is an
// error that names the file and the fix, never a policy that differs from kustomize's.
func TestOverlayRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, kust string
		files      map[string]string
		want       string
	}{
		{name: "a transformer field", kust: "resources: [../base]\nnamePrefix: eu-\n", want: "namePrefix is not read by fleet render"},
		{name: "generators with patches", kust: "generators: [../base]\npatches:\n- patch: '{kind: DaemonSet, metadata: {name: x}}'\n", want: "has generators and patches"},
		{name: "another object", kust: "resources: [../base, ns.yaml]\n", files: map[string]string{"ns.yaml": "apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n"}, want: "v1 Namespace x (from"},
		{name: "two policies", kust: "resources: [../base, p.yaml]\n", files: map[string]string{"p.yaml": "apiVersion: gpupolicy.dev/v1alpha1\nkind: GPUPolicy\nmetadata: {name: other}\n"}, want: "2 GPUPolicies"},
		{name: "the same policy twice", kust: "resources: [../base, ../base/gpupolicy.yaml]\n", want: "a second time"},
		{name: "a patch that matches nothing", kust: "resources: [../base]\npatches:\n- patch: '{apiVersion: gpupolicy.dev/v1alpha1, kind: GPUPolicy, metadata: {name: flet}}'\n", want: "no object matches the patch's gpupolicy.dev/v1alpha1 GPUPolicy flet"},
		{name: "a remote base", kust: "resources:\n- https://github.com/x/y//base?ref=v1\n", want: "is remote"},
		{name: "a cycle", kust: "resources: [.]\n", want: "kustomization cycle"},
		{name: "an op past the end", kust: "resources: [../base]\npatches:\n- target: {kind: GPUPolicy}\n  patch: '[{op: replace, path: /spec/nodePools/5/name, value: x}]'\n", want: "operation 1 (replace /spec/nodePools/5/name): index 5 is past the end"},
		{name: "an unknown op", kust: "resources: [../base]\npatches:\n- target: {kind: GPUPolicy}\n  patch: '[{op: merge, path: /spec}]'\n", want: `op "merge" is not a JSON 6902 operation`},
		{name: "a patch of another shape", kust: "resources: [../base]\npatches:\n- patch: '{apiVersion: gpupolicy.dev/v1alpha1, kind: GPUPolicy, metadata: {name: fleet}, spec: {nodePools: {a: 1}}}'\n", want: "spec.nodePools: the patch gives a mapping where the object has a list"},
		{name: "a label selector", kust: "resources: [../base]\npatches:\n- target: {labelSelector: team=gpu}\n  patch: '[]'\n", want: "labelSelector"},
		{name: "no kustomization", kust: "", want: "no kustomization.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, "base/gpupolicy.yaml", base)
			write(t, dir, "base/kustomization.yaml", "resources: [gpupolicy.yaml]\n")
			if tc.kust != "" {
				write(t, dir, "ov/kustomization.yaml", tc.kust)
			} else {
				write(t, dir, "ov/README", "")
			}
			for name, content := range tc.files {
				write(t, dir, "ov/"+name, content)
			}
			_, err := Policy(filepath.Join(dir, "ov"), NewCache())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want one with %q", err, tc.want)
			}
		})
	}
}
