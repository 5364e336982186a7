package cli

import (
	"os"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/internal/fntest"
)

const diffData = "../diff/testdata/"

// TestDiffUsage: the flags reach diff.Run (its output is fn/diff's golden file, which names
// the inputs relative to fn/diff), flags may follow the operands, and usage errors exit 2
// before anything is read.
func TestDiffUsage(t *testing.T) {
	want, err := os.ReadFile(diffData + "upgrade-all.json")
	if err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := fntest.Run(Diff, "-o", "json", "--fail-on", "none", diffData+"base.yaml", diffData+"head-upgrade-all.yaml"); code != 0 || strings.ReplaceAll(out, diffData, "testdata/") != string(want) {
		t.Errorf("-o json: exit %d, stderr %s; output differs from %supgrade-all.json", code, stderr, diffData)
	}
	for _, tc := range []struct {
		failOn string
		code   int
	}{{"", 0}, {"error", 0}, {"warning", 1}, {"none", 0}} {
		// Flags after the operands work as well as before them.
		args := []string{diffData + "base.yaml", diffData + "head-upgrade-all.yaml"}
		if tc.failOn != "" {
			args = append(args, "--fail-on", tc.failOn)
		}
		code, out, stderr := fntest.Run(Diff, args...)
		if code != tc.code || !strings.Contains(out, "upgrade window") {
			t.Errorf("--fail-on %q: exit %d, want %d (%s):\n%s", tc.failOn, code, tc.code, stderr, out)
		}
	}
	if code, _, _ := fntest.Run(Diff, diffData+"base.yaml"); code != 2 {
		t.Errorf("one argument: exit %d, want 2", code)
	}
	if code, _, _ := fntest.Run(Diff, "--fail-on", "info", diffData+"base.yaml", diffData+"base.yaml"); code != 2 {
		t.Errorf("bad --fail-on: exit %d, want 2", code)
	}
	if code, _, _ := fntest.Run(Diff, "-o", "html", diffData+"base.yaml", diffData+"base.yaml"); code != 2 {
		t.Errorf("bad -o: exit %d, want 2", code)
	}
	if code, _, stderr := fntest.Run(Diff, "-h"); code != 0 || !strings.Contains(stderr, "Usage: gpupolicy-fn diff [flags] BASE HEAD") {
		t.Errorf("-h: exit %d: %s", code, stderr)
	}
}
