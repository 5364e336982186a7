package cli

import (
	"os"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/internal/fntest"
)

// TestAuditUsage: the flags reach audit.Run (its output is fn/audit's golden file) and usage
// errors exit 2 before anything is read.
func TestAuditUsage(t *testing.T) {
	want, err := os.ReadFile("../audit/testdata/fixture.json")
	if err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := fntest.Run(Audit, "-f", "../audit/testdata/fixture.yaml", "-o", "json"); code != 0 || out != string(want) {
		t.Errorf("-o json: exit %d, stderr %s; output differs from ../audit/testdata/fixture.json", code, stderr)
	}
	if code, _, _ := fntest.Run(Audit); code != 2 {
		t.Errorf("no -f: exit %d, want 2", code)
	}
	if code, _, _ := fntest.Run(Audit, "-f", "x", "-o", "html"); code != 2 {
		t.Errorf("bad -o: exit %d, want 2", code)
	}
	if code, _, stderr := fntest.Run(Audit, "--help"); code != 0 || !strings.Contains(stderr, "Usage: gpupolicy-fn audit -f POLICY|DIR|FILE") {
		t.Errorf("--help: exit %d: %s", code, stderr)
	}
}
