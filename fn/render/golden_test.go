package render_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/render"
	"github.com/gpupolicy/gpupolicy/fn/testing/goldentree"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// today pins the driver lifecycle checks so warnings do not change as branches age.
var today = validate.Options{Now: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}

// fluxPath is where the golden flux trees live in an imagined repository.
const fluxPath = "clusters/prod/gpu"

// cases are the directories under testdata/, each a policy.yaml and its expected output.
func cases(t testing.TB) []string {
	entries, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join("testdata", e.Name(), "policy.yaml")); err == nil {
			out = append(out, e.Name())
		}
	}
	if len(out) < 7 {
		t.Fatalf("expected at least 7 golden cases, found %v", out)
	}
	return out
}

func load(t testing.TB, name string) (*v1alpha1.GPUPolicy, render.Objects) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name, "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p, objs, res := pipeline.Load(data, today)
	if res.HasErrors() {
		t.Fatalf("%s: %s", name, res.Text("policy.yaml"))
	}
	return p, objs
}

func fileOptions() render.FileOptions {
	o := render.DefaultFileOptions()
	o.FluxPath = fluxPath
	return o
}

// layout is the tree's file list plus the content of every file that is not an object
// (kustomizations, Flux Kustomizations): the objects themselves are in expected.yaml.
func layout(t testing.TB, files map[string][]byte) []byte {
	var b bytes.Buffer
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintln(&b, n)
	}
	for _, n := range names {
		if strings.HasSuffix(n, "kustomization.yaml") || strings.HasPrefix(n, render.FluxDir+"/") {
			fmt.Fprintf(&b, "\n# --- %s\n%s", n, files[n])
		}
	}
	return b.Bytes()
}

func TestGolden(t *testing.T) {
	for _, name := range cases(t) {
		t.Run(name, func(t *testing.T) {
			p, objs := load(t, name)
			got, err := objs.YAML()
			if err != nil {
				t.Fatal(err)
			}
			goldentree.File(t, filepath.Join("testdata", name, "expected.yaml"), got, *update)
			files, err := render.Files(p, objs, fileOptions())
			if err != nil {
				t.Fatal(err)
			}
			goldentree.File(t, filepath.Join("testdata", name, "layout.txt"), layout(t, files), *update)
		})
	}
}

// TestDeterministic renders every case twice, from fresh decodes, and requires identical
// bytes for the object stream and for every file of the tree.
func TestDeterministic(t *testing.T) {
	for _, name := range cases(t) {
		var first []byte
		var firstFiles map[string][]byte
		for i := 0; i < 3; i++ {
			p, objs := load(t, name)
			y, err := objs.YAML()
			if err != nil {
				t.Fatal(err)
			}
			files, err := render.Files(p, objs, fileOptions())
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				first, firstFiles = y, files
				continue
			}
			if !bytes.Equal(first, y) {
				t.Fatalf("%s: render %d differs from the first: %s", name, i, goldentree.FirstDiff(first, y))
			}
			if len(files) != len(firstFiles) {
				t.Fatalf("%s: %d files, then %d", name, len(firstFiles), len(files))
			}
			for k, v := range files {
				if !bytes.Equal(firstFiles[k], v) {
					t.Fatalf("%s: file %s differs between renders", name, k)
				}
			}
		}
	}
}
