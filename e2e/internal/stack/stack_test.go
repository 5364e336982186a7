package stack

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func obj(kind, name, wave string) *unstructured.Unstructured {
	o := &unstructured.Unstructured{}
	o.SetAPIVersion("v1")
	o.SetKind(kind)
	o.SetName(name)
	if wave != "" {
		o.SetAnnotations(map[string]string{SyncWaveAnnotation: wave})
	}
	return o
}

func TestByWave(t *testing.T) {
	waves, err := ByWave([]*unstructured.Unstructured{
		obj("ConfigMap", "b", "2"), obj("ConfigMap", "a", ""), obj("Namespace", "ns", "-1"), obj("ConfigMap", "c", "2"),
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range waves {
		var names []string
		for _, o := range w.Objects {
			names = append(names, o.GetName())
		}
		got = append(got, strings.Join(names, ","))
	}
	if want := "ns|a|b,c"; strings.Join(got, "|") != want {
		t.Errorf("waves %q, want %q", strings.Join(got, "|"), want)
	}
	if _, err := ByWave([]*unstructured.Unstructured{obj("ConfigMap", "x", "first")}); err == nil || !strings.Contains(err.Error(), "not an integer") {
		t.Errorf("bad wave: err = %v", err)
	}
}

func writeLayout(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const ks = `apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: %s, namespace: flux-system}
spec:
  path: ./flux/%s
  wait: true
  dependsOn: [%s]
`

func TestLoadFluxLayoutOrdersByDependsOn(t *testing.T) {
	k := func(name, deps string) string {
		s := strings.Replace(ks, "%s", name, 1)
		s = strings.Replace(s, "%s", name, 1)
		return strings.Replace(s, "%s", deps, 1)
	}
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: ns}\n"
	root := writeLayout(t, map[string]string{
		"flux/kustomizations.yaml": k("toolkit", "{name: driver}") + "---\n" + k("base", "") + "---\n" + k("driver", "{name: base}"),
		"flux/base/a.yaml":         cm,
		"flux/driver/a.yaml":       cm,
		"flux/toolkit/a.yaml":      cm + "---\n" + k("nested", ""),
	})
	// A Kustomization object inside a stage directory is a child stage (Flux would create it
	// when it applies the directory), ordered after its parent, never an object to apply.
	if err := os.MkdirAll(filepath.Join(root, "flux", "nested"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "flux", "nested", "a.yaml"), []byte(cm), 0o644); err != nil {
		t.Fatal(err)
	}
	stages, err := LoadFluxLayout(context.Background(), "kustomize-not-needed", root, filepath.Join(root, "flux"))
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, s := range stages {
		order = append(order, s.Name)
		for _, o := range s.Objects {
			if o.GetKind() == "Kustomization" {
				t.Errorf("stage %s carries the Flux Kustomization %s as an object", s.Name, o.GetName())
			}
		}
	}
	if got, want := strings.Join(order, ","), "base,driver,toolkit,nested"; got != want {
		t.Errorf("order %s, want %s", got, want)
	}
	if c := stages[2].Children; len(c) != 1 || c[0] != "nested" {
		t.Errorf("children of toolkit: %v", c)
	}
}

func TestLoadFluxLayoutErrors(t *testing.T) {
	k := func(name, path, deps string) string {
		return "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: " + name +
			"}\nspec:\n  path: " + path + "\n  dependsOn: [" + deps + "]\n"
	}
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"
	for name, tc := range map[string]struct {
		files map[string]string
		want  string
	}{
		"cycle":             {map[string]string{"f/k.yaml": k("a", "./f/a", "{name: b}") + "---\n" + k("b", "./f/b", "{name: a}"), "f/a/x.yaml": cm, "f/b/x.yaml": cm}, "cycle"},
		"unknown dep":       {map[string]string{"f/k.yaml": k("a", "./f/a", "{name: zz}"), "f/a/x.yaml": cm}, "does not define"},
		"missing path":      {map[string]string{"f/k.yaml": k("a", "./f/nope", "")}, "not a directory"},
		"no objects":        {map[string]string{"f/k.yaml": k("a", "./f/a", ""), "f/a/README.md": "x"}, "no objects"},
		"no Kustomizations": {map[string]string{"f/x.yaml": cm}, "no kustomize.toolkit.fluxcd.io Kustomization"},
	} {
		t.Run(name, func(t *testing.T) {
			root := writeLayout(t, tc.files)
			_, err := LoadFluxLayout(context.Background(), "kustomize", root, filepath.Join(root, "f"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}
