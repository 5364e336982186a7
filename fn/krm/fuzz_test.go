package krm_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kptdev/krm-functions-sdk/go/fn"

	"github.com/gpupolicy/gpupolicy/fn/krm"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// FuzzKRMFunction feeds arbitrary ResourceLists to the KRM function: no panic, exit 0 exactly
// when no result is an error, and a rejected list carries no items.
// Run: go test ./fn/krm -run '^$' -fuzz FuzzKRMFunction -parallel 1
func FuzzKRMFunction(f *testing.F) {
	presets, _ := filepath.Glob("../../policies/*.yaml")
	seeds, _ := filepath.Glob("../testdata/invalid/*/policy.yaml")
	for _, s := range append(presets, seeds[:min(len(seeds), 20)]...) {
		if b, err := os.ReadFile(s); err == nil {
			f.Add([]byte("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\nfunctionConfig:\n" + indent(string(b), "  ") + "\n"))
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
