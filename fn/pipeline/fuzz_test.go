package pipeline_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpupolicy/gpupolicy/fn/audit"
	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// FuzzPipeline feeds arbitrary documents through decode → default → validate → render → audit.
// Whatever the input: no panic; errors and objects are exclusive; a policy without errors
// renders deterministically and its objects audit cleanly. Seeds: the invalid corpus and the
// presets. Run: go test ./fn/pipeline -run '^$' -fuzz FuzzPipeline -parallel 1
func FuzzPipeline(f *testing.F) {
	seeds, _ := filepath.Glob("../testdata/invalid/*/policy.yaml")
	presets, _ := filepath.Glob("../../policies/*.yaml")
	for _, s := range append(seeds, presets...) {
		if b, err := os.ReadFile(s); err == nil {
			f.Add(b)
		}
	}
	opts := validate.Options{Now: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, objs, res := pipeline.Load(data, opts)
		if res.HasErrors() {
			if objs != nil {
				t.Fatal("objects returned alongside errors")
			}
			for _, r := range res {
				if r.Message == "" {
					t.Fatalf("result without message: %+v", r)
				}
			}
			return
		}
		if len(objs) == 0 {
			t.Fatalf("valid policy rendered nothing:\n%s", res.Text(""))
		}
		first, err := objs.YAML()
		if err != nil {
			t.Fatalf("serialising a valid policy's output: %v", err)
		}
		_, again, _ := pipeline.Load(data, opts)
		second, _ := again.YAML()
		if !bytes.Equal(first, second) {
			t.Fatal("rendering the same policy twice gave different bytes")
		}
		us, err := objs.Unstructured()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := audit.Build(us); err != nil {
			t.Fatalf("audit of rendered objects: %v", err)
		}
	})
}
