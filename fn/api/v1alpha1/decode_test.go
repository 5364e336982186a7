package v1alpha1

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

const minimal = `apiVersion: gpupolicy.dev/v1alpha1
kind: GPUPolicy
metadata:
  name: fleet
spec:
  kubernetesVersion: "1.34"
  driver: {version: "580.95.05"}
  cuda: {version: "12.10"}
`

func TestDecodeMinimalAndDefault(t *testing.T) {
	p, err := Decode([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.CUDA.Version != "12.10" {
		t.Fatalf("cuda.version = %q, want 12.10 kept as written", p.Spec.CUDA.Version)
	}
	Default(p)
	s := p.Spec
	checks := map[string][2]any{
		"namespace":        {s.Namespace, "gpu-system"},
		"gitops":           {s.GitOps, "argocd"},
		"containerd":       {s.ContainerRuntime.Version, "2.1"},
		"cdi":              {Bool(s.Toolkit.CDI), true},
		"setAsDefault":     {Bool(s.Toolkit.SetAsDefault), false},
		"replicas":         {*s.DevicePlugin.Sharing.TimeSlicing.Replicas, 1},
		"exporter.port":    {*s.Exporter.Port, 9400},
		"guardrails":       {Bool(s.Guardrails.Enabled), true},
		"nodeSelector":     {s.NodeSelector["nvidia.com/gpu.present"], "true"},
		"ignoredXIDs":      {len(s.DevicePlugin.HealthChecks.IgnoredXIDs), 6},
		"images.gpupolicy": {s.Images.GPUPolicy, DefaultGPUPolicyImage()},
	}
	for name, c := range checks {
		if !reflect.DeepEqual(c[0], c[1]) {
			t.Errorf("%s = %v, want %v", name, c[0], c[1])
		}
	}
}

func TestDefaultPoolsInheritAndStayIndependent(t *testing.T) {
	p, err := Decode([]byte(minimal + `  devicePlugin: {migStrategy: mixed, healthChecks: {ignoredXIDs: []}}
  nodePools:
  - name: inference
    nodeSelector: {pool: inference}
    devicePlugin: {sharing: {timeSlicing: {replicas: 4}}}
  - name: training
    nodeSelector: {pool: training}
`))
	if err != nil {
		t.Fatal(err)
	}
	Default(p)
	inf, tr := p.Spec.NodePools[0].DevicePlugin, p.Spec.NodePools[1].DevicePlugin
	if inf.Sharing.TimeSlicing.GetReplicas() != 4 || tr.Sharing.TimeSlicing.GetReplicas() != 1 {
		t.Errorf("replicas = %d/%d, want 4/1", inf.Sharing.TimeSlicing.GetReplicas(), tr.Sharing.TimeSlicing.GetReplicas())
	}
	if inf.MIGStrategy != "mixed" || tr.ResourceName != "nvidia.com/gpu" {
		t.Errorf("pool did not inherit spec.devicePlugin: %+v", inf)
	}
	if xids := tr.HealthChecks.IgnoredXIDs; xids == nil || len(xids) != 0 {
		t.Errorf("explicit empty ignoredXIDs must stay empty, got %v", xids)
	}
	*inf.Sharing.TimeSlicing.Replicas = 9
	if p.Spec.DevicePlugin.Sharing.TimeSlicing.GetReplicas() != 1 || tr.Sharing.TimeSlicing.GetReplicas() != 1 {
		t.Error("pools share nested values with spec.devicePlugin")
	}
}

// TestDefaultKeepsExplicitZero: a defaulted number set to 0 stays 0 (validation reports it);
// only an absent or null field takes the default. Before numbers were pointers, 0 became 1.
func TestDefaultKeepsExplicitZero(t *testing.T) {
	p, err := Decode([]byte(minimal + `  devicePlugin: {sharing: {timeSlicing: {replicas: 0}}}
  exporter: {port: 0}
  nodePools:
  - name: a
    nodeSelector: {pool: a}
    devicePlugin: {sharing: {timeSlicing: {replicas: 0}}}
  - name: b
    nodeSelector: {pool: b}
    devicePlugin: {sharing: {timeSlicing: {replicas: null}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	Default(p)
	s := p.Spec
	got := []int{s.DevicePlugin.Sharing.TimeSlicing.GetReplicas(), s.Exporter.GetPort(),
		s.NodePools[0].DevicePlugin.Sharing.TimeSlicing.GetReplicas(), s.NodePools[1].DevicePlugin.Sharing.TimeSlicing.GetReplicas()}
	if !reflect.DeepEqual(got, []int{0, 0, 0, 0}) {
		t.Errorf("replicas, port, pool a, pool b (inherits) = %v, want the explicit zeros kept: [0 0 0 0]", got)
	}
}

// TestDecodeNumberTooLarge: a number beyond int64 (YAML resolves it as a float) is reported
// as too large, with the field's range, not as a wrong type.
func TestDecodeNumberTooLarge(t *testing.T) {
	for _, v := range []string{"10000000000000000000", "1e30"} {
		_, err := Decode([]byte(minimal + "  devicePlugin: {sharing: {timeSlicing: {replicas: " + v + "}}}\n"))
		if err == nil || !strings.Contains(err.Error(), "spec.devicePlugin.sharing.timeSlicing.replicas") ||
			!strings.Contains(err.Error(), v+" is too large a number: use a whole number from 1 to 256") || strings.Contains(err.Error(), "float") {
			t.Errorf("replicas: %s: %v", v, err)
		}
	}
	if _, err := Decode([]byte(minimal + "  devicePlugin: {sharing: {timeSlicing: {replicas: 2.5}}}\n")); err == nil || !strings.Contains(err.Error(), "must be a whole number") {
		t.Errorf("replicas: 2.5: %v", err)
	}
}

func TestDecodeErrorsNameTheirPath(t *testing.T) {
	cases := []struct {
		name, doc string
		want      []string // substrings, each must appear in the error text
	}{
		{"unquoted version", strings.Replace(minimal, `"12.10"`, `12.10`, 1), []string{"spec.cuda.version", "quote it", `"12.10"`}},
		{"unknown field with hint", minimal + "  toolkit: {cdii: true}\n", []string{"spec.toolkit.cdii", `did you mean "cdi"`}},
		{"wrong type", minimal + "  exporter: {port: nine}\n", []string{"spec.exporter.port", "whole number"}},
		{"bool label value", minimal + "  nodeSelector: {gpu: true}\n", []string{"spec.nodeSelector[gpu]", "boolean"}},
		{"duplicate key", minimal + "  gitops: flux\n  gitops: none\n", []string{"spec.gitops", "Duplicate"}},
		{"wrong kind", strings.Replace(minimal, "kind: GPUPolicy", "kind: ClusterPolicy", 1), []string{"kind", "GPUPolicy"}},
		{"list where map", minimal + "  nodePools: {a: b}\n", []string{"spec.nodePools", "list"}},
		{"all at once", minimal + "  toolkit: {cdi: yes-please}\n  exporter: {port: x}\n", []string{"spec.toolkit.cdi", "spec.exporter.port"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode([]byte(c.doc))
			var fe FieldErrors
			if !errors.As(err, &fe) {
				t.Fatalf("want FieldErrors, got %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestDecodeSyntaxAndShape(t *testing.T) {
	for name, doc := range map[string]string{
		"empty":     "",
		"syntax":    "spec: [",
		"two docs":  minimal + "---\n" + minimal,
		"not a map": "- a\n",
	} {
		if _, err := Decode([]byte(doc)); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
}

func TestDecodeReadsEveryDocument(t *testing.T) {
	for name, c := range map[string]struct{ doc, want string }{
		// The second document's syntax error used to be ignored: the first policy was rendered.
		"broken second document": {minimal + "---\nspec: {gitops: [\n", "YAML syntax in document 2 (it starts at line 10)"},
		"broken third document":  {minimal + "---\n# nothing\n---\na: [b\n", "document 3 (it starts at line 12)"},
		"second policy":          {minimal + "---\n" + minimal, "more than one YAML document (document 2, line 10)"},
		"explicit first marker":  {"---\n" + minimal + "---\nx: [\n", "document 2 (it starts at line 11)"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Decode([]byte(c.doc))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to contain %q", err, c.want)
			}
		})
	}
	for name, doc := range map[string]string{
		"trailing empty document": minimal + "---\n",
		"leading empty document":  "---\n---\n" + minimal,
		"comment-only document":   minimal + "---\n# the end\n",
	} {
		if _, err := Decode([]byte(doc)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestDecodeRefusesWhatIsNotUTF8Text(t *testing.T) {
	latin1 := strings.Replace(minimal, "name: fleet", "name: fleet\n  labels: {owner: Jos\xe9}", 1)
	_, err := Decode([]byte(latin1))
	for _, w := range []string{"not UTF-8", "line 5, column 22 (byte offset 96)", "0xE9", "iconv"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v does not contain %q", err, w)
		}
	}
	_, err = Decode([]byte(minimal + "  gitops: \"flux\x00\"\n"))
	if err == nil || !strings.Contains(err.Error(), "control character U+0000 at line 9, column 16") {
		t.Errorf("NUL: %v", err)
	}
	_, err = Decode([]byte(minimal + "  gitops: \"flux\u0080\"\n"))
	if err == nil || !strings.Contains(err.Error(), "control character U+0080 at line 9, column 16") {
		t.Errorf("C1 control: %v", err)
	}
	if _, err := Decode([]byte("\ufeff" + minimal)); err != nil {
		t.Errorf("a UTF-8 byte order mark is UTF-8: %v", err)
	}
	// UTF-16 is named as such (with or without a byte order mark), with the iconv to run.
	utf16 := func(bigEndian bool, bom bool) []byte {
		var b []byte
		if bom {
			b = append(b, 0xff, 0xfe)
			if bigEndian {
				b[0], b[1] = 0xfe, 0xff
			}
		}
		for _, c := range []byte(minimal) {
			if bigEndian {
				b = append(b, 0, c)
			} else {
				b = append(b, c, 0)
			}
		}
		return b
	}
	for _, c := range []struct {
		be, bom bool
		want    string
	}{
		{false, true, "is UTF-16LE (it starts with the byte order mark FF FE), not UTF-8; YAML files must be UTF-8: re-save the file as UTF-8 (e.g. iconv -f UTF-16LE -t UTF-8)"},
		{true, true, "is UTF-16BE (it starts with the byte order mark FE FF), not UTF-8; YAML files must be UTF-8: re-save the file as UTF-8 (e.g. iconv -f UTF-16BE -t UTF-8)"},
		{false, false, "is UTF-16LE (every other byte is NUL), not UTF-8; YAML files must be UTF-8: re-save the file as UTF-8 (e.g. iconv -f UTF-16LE -t UTF-8)"},
		{true, false, "is UTF-16BE (every other byte is NUL), not UTF-8"},
	} {
		if _, err := Decode(utf16(c.be, c.bom)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("UTF-16 (big-endian %v, BOM %v): %v, want %q", c.be, c.bom, err, c.want)
		}
	}
}

// mergePolicy uses merge keys where a person would: shared pool settings and a selector base.
const mergePolicy = `apiVersion: gpupolicy.dev/v1alpha1
kind: GPUPolicy
metadata:
  name: fleet
spec:
  kubernetesVersion: "1.34"
  driver: {version: "580.95.05"}
  cuda: {version: "12.8"}
  nodeSelector: &gpu {nvidia.com/gpu.present: "true"}
  devicePlugin: &dp
    migStrategy: single
    sharing: {timeSlicing: {replicas: 2}}
  nodePools:
  - name: inference
    nodeSelector:
      <<: *gpu
      pool: inference
    devicePlugin:
      <<: *dp
      sharing: {timeSlicing: {replicas: 4}}
  - name: training
    nodeSelector: {<<: [{pool: training, zone: a}, {zone: b, rack: r1}]}
    devicePlugin: {<<: *dp}
`

// TestDecodeMergeKeysAsKustomizeReadsThem: render -f reads merge keys exactly as kustomize
// does (kyaml's DeAnchor, which the KRM path receives); before, render -f refused "<<" as an
// unknown field.
func TestDecodeMergeKeysAsKustomizeReadsThem(t *testing.T) {
	got, err := Decode([]byte(mergePolicy))
	if err != nil {
		t.Fatal(err)
	}
	rn, err := kyaml.Parse(mergePolicy)
	if err != nil {
		t.Fatal(err)
	}
	if err := rn.DeAnchor(); err != nil {
		t.Fatal(err)
	}
	want, err := Decode([]byte(rn.MustString()))
	if err != nil {
		t.Fatalf("kyaml's expansion does not decode: %v\n%s", err, rn.MustString())
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded differently from kyaml's expansion:\n got %+v\nwant %+v\nkyaml:\n%s", got.Spec.NodePools, want.Spec.NodePools, rn.MustString())
	}
	tr := got.Spec.NodePools[1]
	if tr.NodeSelector["zone"] != "a" || tr.NodeSelector["rack"] != "r1" || got.Spec.NodePools[0].DevicePlugin.Sharing.TimeSlicing.GetReplicas() != 4 {
		t.Errorf("merge precedence: %v %+v", tr.NodeSelector, got.Spec.NodePools[0].DevicePlugin.Sharing)
	}
}

func TestDecodeMergeKeyMistakes(t *testing.T) {
	for name, c := range map[string]struct{ doc, want string }{
		"merges a list":   {minimal + "  nodeSelector: {<<: [a, b]}\n", "a merge key (<<) takes a mapping"},
		"merges a scalar": {minimal + "  toolkit: {<<: x}\n", "a merge key (<<) takes a mapping"},
		"merges itself":   {minimal + "  toolkit: &t {<<: *t}\n", "merges itself"},
		"two merge keys":  {minimal + "  toolkit: {<<: {cdi: true}, <<: {cdi: false}}\n", "a second merge key"},
		"merged unknown":  {minimal + "  toolkit: {<<: {cdii: true}}\n", `spec.toolkit.cdii`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Decode([]byte(c.doc))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestDecodeLimits(t *testing.T) {
	list := func(n int, f string) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, f, i)
		}
		return b.String()
	}
	for name, c := range map[string]struct{ doc, want string }{
		"pull secrets": {minimal + "  imagePullSecrets: [" + list(33, "s%d, ") + "]\n",
			"spec.imagePullSecrets: Forbidden: line 9: has 33 items, over the limit of 32 for spec.imagePullSecrets"},
		"node selector": {minimal + "  nodeSelector: {" + list(33, "k%d: v, ") + "}\n", "has 33 entries, over the limit of 32"},
		"merged over the limit": {minimal + "  nodeSelector: {<<: {" + list(20, "a%d: v, ") + "}, " + list(20, "b%d: v, ") + "}\n",
			"has more than 32 entries, over the limit of 32 for spec.nodeSelector"},
		"pool selector": {minimal + "  nodePools:\n  - {name: a, nodeSelector: {" + list(40, "k%d: v, ") + "}}\n",
			"spec.nodePools[0].nodeSelector: Forbidden: line 10: has 40 entries, over the limit of 32 for spec.nodePools[*].nodeSelector"},
		"pools":  {minimal + "  nodePools:\n" + list(1001, "  - {name: p%d, nodeSelector: {a: b}}\n"), "has 1001 items, over the limit of 1000"},
		"labels": {strings.Replace(minimal, "name: fleet", "name: fleet\n  labels: {"+list(257, "l%d: v, ")+"}", 1), "over the limit of 256 for metadata.labels"},
		// 3,000 merges of a 1,000-key mapping: 27 KB of YAML naming 3 million values.
		"merge bomb": {minimal + "  images: &big {" + list(1000, "k%d: v, ") + "}\n  toolkit: {<<: [" + strings.Repeat("*big, ", 3000) + "]}\n",
			"expands to more than 2000000 YAML values"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Decode([]byte(c.doc))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to contain %q", err, c.want)
			}
		})
	}
}

// TestReferenceListsEveryLimit keeps the reference's Limits table in step with limits.go.
func TestReferenceListsEveryLimit(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	ref := string(b)
	_, table, _ := strings.Cut(ref, "\n## Limits\n")
	table, _, _ = strings.Cut(table, "\n## ")
	for _, l := range EntryLimits {
		row := ""
		for _, line := range strings.Split(table, "\n") {
			if strings.Contains(line, "`"+l.Field+"`") {
				row = line
			}
		}
		if !strings.Contains(row, fmt.Sprintf("| %d ", l.Max)) {
			t.Errorf("the Limits table has no row naming `%s` with %d: %q", l.Field, l.Max, row)
		}
	}
	for _, want := range []string{"| 1 MiB |", "| 16 MiB |", fmt.Sprintf("any other list or map | %d entries", MaxEntries), "| 2,000,000 |", fmt.Sprintf("| %d |", maxDecodeErrors)} {
		if !strings.Contains(table, want) {
			t.Errorf("the Limits table lacks %q", want)
		}
	}
	if MaxPolicyBytes != 1<<20 || MaxResourceListBytes != 16<<20 || maxDecodedValues != 2_000_000 {
		t.Error("a byte or value limit changed: update the Limits table and this test")
	}
}
