package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

var update = flag.Bool("update", false, "rewrite the committed schema, CRD and reference table")

const (
	apiDir    = "../../api/v1alpha1"
	schemaDir = "../../api/v1alpha1/schema"
	reference = "../../api/v1alpha1/README.md"
)

// TestSchemaUpToDate fails when a committed generated file differs from what the generator
// writes now: a field was added or a comment or default changed without `go generate`.
func TestSchemaUpToDate(t *testing.T) {
	files, err := generate(apiDir, schemaDir, reference)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range files {
		if *update {
			if err := writeAtomic(path, want); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run `go generate ./fn/api/v1alpha1/schema` (or go test ./fn/internal/schemagen -update) and commit it", path)
		}
	}
}

func TestSchemaDeterministic(t *testing.T) {
	a, err := generate(apiDir, schemaDir, reference)
	if err != nil {
		t.Fatal(err)
	}
	b, err := generate(apiDir, schemaDir, reference)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs of the generator differ")
	}
}

// TestEveryFieldDescribed keeps the reference and editor hovers complete: a new field needs a
// doc comment on its field in fn/api/v1alpha1, the one home of its description.
func TestEveryFieldDescribed(t *testing.T) {
	root := buildRoot(t)
	spec := propertyNamed(root, "spec")
	var walk func(path string, n *node)
	walk = func(path string, n *node) {
		for _, p := range n.properties {
			fp := path + "." + p.name
			if strings.TrimSpace(p.description) == "" {
				t.Errorf("%s has no description: document the field in fn/api/v1alpha1/types.go", fp)
			}
			if p.items != nil && p.items.goType == "" {
				walk(fp+"[]", p.items)
			} else if p.goType == "" {
				walk(fp, p.node)
			}
		}
	}
	walk("spec", spec)
}

// TestSchemaDefaultsMatchDefaultsGo checks a few defaults against the constants, so the
// reflection over Default cannot silently miss a field.
func TestSchemaDefaultsMatchDefaultsGo(t *testing.T) {
	root := buildRoot(t)
	for path, want := range map[string]any{
		"spec.namespace":                                 v1alpha1.DefaultNamespace,
		"spec.gitops":                                    v1alpha1.DefaultGitOps,
		"spec.containerRuntime.version":                  v1alpha1.DefaultContainerdVersion,
		"spec.toolkit.cdi":                               true,
		"spec.toolkit.setAsDefault":                      false,
		"spec.devicePlugin.sharing.timeSlicing.replicas": config.DefaultReplicas,
		"spec.devicePlugin.healthChecks.ignoredXIDs":     config.DefaultIgnoredXIDs(),
		"spec.exporter.port":                             v1alpha1.DefaultExporterPort,
		"spec.nodeSelector":                              v1alpha1.DefaultNodeSelector(),
	} {
		n := root
		for _, seg := range strings.Split(path, ".") {
			n = propertyNamed(n, seg)
			if n == nil {
				t.Fatalf("%s: not in the schema", path)
			}
		}
		wantJSON, _ := json.Marshal(want)
		if string(n.def) != string(wantJSON) {
			t.Errorf("%s: schema default %s, defaults.go %s", path, n.def, wantJSON)
		}
	}
	if propertyNamed(propertyNamed(root, "spec"), "kubernetesVersion").def != nil {
		t.Error("spec.kubernetesVersion must have no default")
	}
}

// minimalPolicyYAML has only the fields without a default.
const minimalPolicyYAML = "apiVersion: gpupolicy.dev/v1alpha1\nkind: GPUPolicy\nmetadata: {name: x}\nspec:\n  kubernetesVersion: \"1.34\"\n  driver: {version: \"580.95.05\"}\n  cuda: {version: \"12.8\"}\n"

// validPolicies are documents the schema must accept: every preset, the minimal policy, and
// both forms of an int-or-string field.
func validPolicies(t *testing.T) map[string][]byte {
	t.Helper()
	docs := map[string][]byte{
		"minimal":              []byte(minimalPolicyYAML),
		"maxUnavailable int":   withDriver("upgrade: {maxUnavailable: 2}"),
		"maxUnavailable share": withDriver("upgrade: {maxUnavailable: \"25%\"}"),
	}
	presets, _ := filepath.Glob("../../../policies/*.yaml")
	if len(presets) == 0 {
		t.Fatal("no preset under policies/")
	}
	for _, path := range presets {
		docs[filepath.Base(path)] = mustRead(t, path)
	}
	return docs
}

// withDriver is minimalPolicyYAML with more fields in spec.driver.
func withDriver(fields string) []byte {
	return []byte(strings.Replace(minimalPolicyYAML, `driver: {version: "580.95.05"}`, `driver: {version: "580.95.05", `+fields+`}`, 1))
}

// mistakes are additions to minimalPolicyYAML the schema must refuse; decoder says whether
// v1alpha1.Decode refuses them too (enums and ranges are validation's job).
var mistakes = map[string]struct {
	extra   string
	decoder bool
}{
	"unknown field":         {"  gitOps: argocd\n", true},
	"unquoted version":      {"  containerRuntime: {version: 1.7}\n", true},
	"bad enum":              {"  gitops: helm\n", false},
	"port range":            {"  exporter: {port: 70000}\n", false},
	"pool without selector": {"  nodePools: [{name: a}]\n", false},
}

// TestSchemaAgreesWithDecoder validates policies against the committed JSON Schema: every
// preset must pass, and the mistakes the strict decoder rejects must fail the schema too.
func TestSchemaAgreesWithDecoder(t *testing.T) {
	var schema map[string]any
	if err := json.Unmarshal(mustRead(t, filepath.Join(schemaDir, JSONSchemaFile)), &schema); err != nil {
		t.Fatal(err)
	}
	for name, doc := range validPolicies(t) {
		if errs := validate(schema, yamlToJSON(t, doc), ""); len(errs) > 0 {
			t.Errorf("%s: %v", name, errs)
		}
	}
	for name, c := range mistakes {
		doc := []byte(minimalPolicyYAML + c.extra)
		if _, err := v1alpha1.Decode(doc); c.decoder && err == nil {
			t.Errorf("%s: the decoder accepts it; the case is wrong", name)
		}
		if errs := validate(schema, yamlToJSON(t, doc), ""); len(errs) == 0 {
			t.Errorf("%s: the schema accepts %q", name, c.extra)
		}
	}
}

func buildRoot(t *testing.T) *node {
	t.Helper()
	pkg := reflect.TypeOf(v1alpha1.GPUPolicy{}).PkgPath()
	root, err := (&builder{docs: newComments(map[string]string{pkg: apiDir})}).policy()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func propertyNamed(n *node, name string) *node {
	for _, p := range n.properties {
		if p.name == name {
			return p.node
		}
	}
	return nil
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func yamlToJSON(t *testing.T, y []byte) any {
	t.Helper()
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(j, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestCRDIsStructural checks the rules the API server applies to a CRD's schema that a JSON
// Schema does not have: every node has a type (or is int-or-string), properties and additionalProperties never meet,
// and no JSON-Schema-only keywords appear.
func TestCRDIsStructural(t *testing.T) {
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(mustRead(t, filepath.Join(schemaDir, CRDFile)), &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("%d versions", len(crd.Spec.Versions))
	}
	var walk func(path string, s map[string]any)
	walk = func(path string, s map[string]any) {
		// x-kubernetes-int-or-string and a node that keeps its value whole
		// (x-kubernetes-preserve-unknown-fields: MIG devices, "all" or a list) are the nodes a
		// structural schema leaves untyped.
		if _, ok := s["type"]; !ok && s["x-kubernetes-int-or-string"] != true && s["x-kubernetes-preserve-unknown-fields"] != true {
			t.Errorf("%s: no type", path)
		}
		for _, k := range []string{"$schema", "$comment", "title", "$ref"} {
			if _, ok := s[k]; ok {
				t.Errorf("%s: %s is not allowed in a CRD schema", path, k)
			}
		}
		props, hasProps := s["properties"].(map[string]any)
		if ap, ok := s["additionalProperties"]; ok {
			if hasProps {
				t.Errorf("%s: properties and additionalProperties together", path)
			}
			if m, ok := ap.(map[string]any); ok {
				walk(path+".*", m)
			} else {
				t.Errorf("%s: additionalProperties must be a schema, not %v", path, ap)
			}
		}
		for k, v := range props {
			walk(path+"."+k, v.(map[string]any))
		}
		if items, ok := s["items"].(map[string]any); ok {
			walk(path+"[]", items)
		}
	}
	walk("", crd.Spec.Versions[0].Schema.OpenAPIV3Schema)
}
