package source

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/validate"
)

func write(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Documents are numbered from 1 (audit counted from 0 before audit and doctor shared this
// reader; doctor from 1).
func TestLoadRejectsWhatIsNotARenderedTree(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		body, want string
	}{
		"policy-inside.yaml":  {"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: gpupolicy.dev/v1alpha1\nkind: GPUPolicy\nmetadata: {name: b}\n", "document 2 is a GPUPolicy inside a rendered tree"},
		"policy-in-list.json": {`{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"gpupolicy.dev/v1alpha1","kind":"GPUPolicy","metadata":{"name":"b"}}]}`, "document 1: items[0] is a GPUPolicy inside a rendered tree"},
		"policy-first.yaml":   {"apiVersion: gpupolicy.dev/v1alpha1\nkind: GPUPolicy\nmetadata: {name: b}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n", "is not a valid GPUPolicy"},
		"no-kind.yaml":        {"metadata: {name: a}\n", "no-kind.yaml: document 1 has no apiVersion or kind"},
		"broken.yaml":         {"apiVersion: v1\nkind: [\n", "document 1"},
	} {
		if _, err := Load(write(t, dir, name, tc.body), validate.Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
	}
	objs, err := Decode("k.yaml", []byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [a.yaml]\n---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"))
	if err != nil || len(objs) != 1 || objs[0].GetKind() != "ConfigMap" {
		t.Errorf("kustomization.yaml and empty documents must be skipped: %v %v", objs, err)
	}
	if _, err := Load(t.TempDir(), validate.Options{}); err == nil || !strings.Contains(err.Error(), "holds no Kubernetes objects") {
		t.Errorf("empty dir: %v", err)
	}
	missing := filepath.Join(dir, "missing")
	if _, err := Load(missing, validate.Options{}); err == nil || !strings.HasPrefix(err.Error(), missing+": ") {
		t.Errorf("a missing path must be named first: %v", err)
	}
}

func TestDecodeObjects(t *testing.T) {
	list := `{"apiVersion":"config.kubernetes.io/v1","kind":"ResourceList","items":[{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"gpu-system"}}]}`
	objs, err := Decode("list.json", []byte(list))
	if err != nil || len(objs) != 1 || objs[0].GetName() != "gpu-system" {
		t.Fatalf("ResourceList must be unpacked: %v %v", objs, err)
	}
	if _, err := Decode("bad.yaml", []byte("a: b\n")); err == nil || !strings.Contains(err.Error(), "bad.yaml: document 1 has no apiVersion or kind") {
		t.Errorf("want a named error for a non-object, got %v", err)
	}
}

// A directory is read in path order, JSON included, and hidden directories (.git) are not part
// of the tree.
func TestReadDirOrderAndHidden(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "b/z.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bz}\n")
	write(t, dir, "a.json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}`)
	write(t, dir, "b/c.yml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bc}\n")
	write(t, dir, ".git/x.yaml", "not: an object\n")
	write(t, dir, "README.md", "# not read\n")
	in, err := Load(dir, validate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range in.Objects {
		names = append(names, o.GetName())
	}
	if got := strings.Join(names, ","); got != "a,bc,bz" || in.Policy != nil {
		t.Errorf("objects %s, policy %v; want a,bc,bz and no policy", got, in.Policy)
	}
}

func TestLoadPolicyRenders(t *testing.T) {
	in, err := Load("../audit/testdata/policy.yaml", validate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if in.Policy == nil || len(in.Objects) == 0 {
		t.Fatalf("a policy must be rendered: policy %v, %d objects", in.Policy, len(in.Objects))
	}
}

// TestLoadLimits: a policy file over v1alpha1.MaxPolicyBytes and a file of rendered objects
// over 64 MiB are refused naming the file and the limit (the second before it is read).
func TestLoadLimits(t *testing.T) {
	dir := t.TempDir()
	policy := "apiVersion: gpupolicy.dev/v1alpha1\nkind: GPUPolicy\nmetadata: {name: b}\n" + strings.Repeat("# padding\n", 120_000)
	if _, err := Load(write(t, dir, "big-policy.yaml", policy), validate.Options{}); err == nil || !strings.Contains(err.Error(), "over the 1 MiB limit") {
		t.Errorf("big policy: %v", err)
	}
	huge := write(t, dir, "huge.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")
	if err := os.Truncate(huge, 65<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(huge, validate.Options{}); err == nil || !strings.Contains(err.Error(), "huge.yaml is over the 64 MiB limit") {
		t.Errorf("huge rendered file: %v", err)
	}
}
