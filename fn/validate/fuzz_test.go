package validate_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kptdev/krm-functions-sdk/go/fn"

	"github.com/gpupolicy/gpupolicy/fn/audit"
	"github.com/gpupolicy/gpupolicy/fn/krm"
	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// FuzzPipeline feeds arbitrary documents through decode → default → validate → render → audit.
// Whatever the input: no panic; errors and objects are exclusive; a policy without errors
// renders deterministically and its objects audit cleanly. Seeds: the invalid corpus and the
// presets. Run: go test ./fn/validate -run '^$' -fuzz FuzzPipeline -parallel 1
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

// FuzzKRMFunction feeds arbitrary ResourceLists to the KRM function: no panic, exit 0 exactly
// when no result is an error, and a rejected list carries no items.
// Run: go test ./fn/validate -run '^$' -fuzz FuzzKRMFunction -parallel 1
func FuzzKRMFunction(f *testing.F) {
	presets, _ := filepath.Glob("../../policies/*.yaml")
	seeds, _ := filepath.Glob("../testdata/invalid/*/policy.yaml")
	for _, s := range append(presets, seeds[:min(len(seeds), 20)]...) {
		if b, err := os.ReadFile(s); err == nil {
			f.Add([]byte("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\nfunctionConfig:\n" + indent(string(b))))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var stdout, stderr bytes.Buffer
		code := krm.Run(bytes.NewReader(data), &stdout, &stderr, validate.Options{Now: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)})
		if stdout.Len() == 0 {
			if code == 0 {
				t.Fatal("exit 0 without output")
			}
			return
		}
		rl, err := fn.ParseResourceList(stdout.Bytes())
		if err != nil {
			t.Fatalf("output is not a ResourceList: %v", err)
		}
		if (rl.Results.ExitCode() == 1) != (code == 1) {
			t.Fatalf("exit %d but results %v", code, rl.Results)
		}
		if code == 1 && len(rl.Items) > 0 {
			t.Fatalf("rejected ResourceList still carries %d items", len(rl.Items))
		}
	})
}
