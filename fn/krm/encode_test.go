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

	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// reference is the output as yaml.v3 writes it when the rendered objects are node trees in
// the list (Object.Node plus the file annotations added to the tree): what the function
// wrote before the objects were spliced in as text, and what Run must still write.
func reference(t *testing.T, in []byte) []byte {
	t.Helper()
	rl, err := fn.ParseResourceList(in)
	if err != nil {
		t.Fatal(err)
	}
	items, objs, _, err := process(rl, validate.Options{Now: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
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
	out, err := encode(rl, items, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
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
