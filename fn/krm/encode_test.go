package krm

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	yaml "go.yaml.in/yaml/v3"

	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// reference is the output as kpt's functions SDK reads the input and yaml.v3 writes the
// list with the rendered objects as node trees (Object.Node plus the file annotations added
// to the tree): what the function wrote when it read the list through the SDK and before the
// objects were spliced in as text, and what Run must still write.
func reference(t *testing.T, in []byte) []byte {
	t.Helper()
	rl, err := fn.ParseResourceList(in)
	if err != nil {
		t.Fatal(err)
	}
	node := func(o *fn.KubeObject) *yaml.Node {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(o.String()), &doc); err != nil {
			t.Fatal(err)
		}
		return doc.Content[0]
	}
	var items []*yaml.Node
	var policy *fn.KubeObject
	if rl.FunctionConfig.GetKind() == "GPUPolicy" {
		policy = rl.FunctionConfig
	}
	for _, it := range rl.Items {
		if it.GetKind() == "GPUPolicy" {
			policy = it
			continue
		}
		items = append(items, node(it))
	}
	_, objs, res := pipeline.Load([]byte(policy.String()), validate.Options{Now: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)})
	if res.HasErrors() {
		t.Fatal(res.Text(""))
	}
	for _, o := range objs {
		n, err := o.Node()
		if err != nil {
			t.Fatal(err)
		}
		meta := mappingChild(n, "metadata")
		ann := mappingChild(meta, "annotations")
		kv := fileAnnotations(o)
		for _, k := range slices.Sorted(maps.Keys(kv)) {
			ann.Content = append(ann.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k},
				&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: kv[k]})
		}
		sortPairs(ann)
		items = append(items, n)
	}
	out := &resourceList{}
	var sdk fn.Results
	for _, x := range res.Sorted() {
		r := &fn.Result{Severity: fn.Severity(x.Severity), Message: x.Message, ResourceRef: &fn.ResourceRef{
			APIVersion: policy.GetAPIVersion(), Kind: policy.GetKind(), Name: policy.GetName(), Namespace: policy.GetNamespace()}}
		if x.Field != "" {
			r.Field = &fn.Field{Path: x.Field, CurrentValue: x.Value}
		}
		sdk = append(sdk, r)
	}
	if len(sdk) > 0 {
		var n yaml.Node
		if err := n.Encode(sdk); err != nil {
			t.Fatal(err)
		}
		out.results = n.Content
	}
	if !rl.FunctionConfig.IsEmpty() {
		out.functionConfig = node(rl.FunctionConfig)
	}
	text, err := encode(out, items, nil)
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// mappingChild returns the mapping under key in m, adding an empty one at the end if absent.
func mappingChild(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	child := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, child)
	return child
}

func sortPairs(m *yaml.Node) {
	pairs := make([][2]*yaml.Node, 0, len(m.Content)/2)
	for i := 0; i+1 < len(m.Content); i += 2 {
		pairs = append(pairs, [2]*yaml.Node{m.Content[i], m.Content[i+1]})
	}
	slices.SortStableFunc(pairs, func(a, b [2]*yaml.Node) int { return strings.Compare(a[0].Value, b[0].Value) })
	m.Content = m.Content[:0]
	for _, p := range pairs {
		m.Content = append(m.Content, p[0], p[1])
	}
}

// TestOutputMatchesNodeTreeEncoding: for every golden policy, as functionConfig (with
// passed-through items carrying comments) and as an item, Run writes exactly the bytes of
// the node-tree encoding.
func TestOutputMatchesNodeTreeEncoding(t *testing.T) {
	policies, err := filepath.Glob("../render/testdata/*/policy.yaml")
	if err != nil || len(policies) == 0 {
		t.Fatalf("no golden policies: %v", err)
	}
	for _, p := range policies {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		policy := strings.TrimRight(string(b), "\n")
		asConfig := "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n" +
			"- apiVersion: v1\n  kind: ConfigMap # why it is here\n  metadata:\n    name: x\n    annotations:\n      yes: \"on\"\n  # trailing note\n" +
			"- apiVersion: v1\n  kind: Secret\n  metadata: {name: s}\n" +
			"functionConfig:\n  " + strings.ReplaceAll(policy, "\n", "\n  ") + "\n"
		asItem := "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- " +
			strings.ReplaceAll(policy, "\n", "\n  ") + "\n"
		for name, in := range map[string]string{"functionConfig": asConfig, "item": asItem} {
			var out, errb bytes.Buffer
			if code := Run(strings.NewReader(in), &out, &errb, validate.Options{Now: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}); code != 0 {
				t.Fatalf("%s as %s: exit %d: %s", p, name, code, errb.String())
			}
			if want := reference(t, []byte(in)); !bytes.Equal(out.Bytes(), want) {
				t.Errorf("%s as %s: output differs from the node-tree encoding\n--- got\n%s\n--- want\n%s", p, name, out.String(), want)
			}
		}
	}
}
