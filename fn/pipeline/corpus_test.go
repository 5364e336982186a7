package pipeline_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// invalidCase is one directory of fn/testdata/invalid: a policy that must be rejected and the
// result that says why.
type invalidCase struct {
	Name     string
	Policy   []byte
	Severity validate.Severity `json:"severity"`
	Field    string            `json:"field"`
	Message  string            `json:"message"`
	// KRM overrides field and message for the KRM function where it words a case differently.
	KRM *struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"krm,omitempty"`
}

const invalidDir = "../testdata/invalid"

func loadInvalidCases(t testing.TB) []invalidCase {
	t.Helper()
	dirs, err := os.ReadDir(invalidDir)
	if err != nil {
		t.Fatal(err)
	}
	var cases []invalidCase
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		c := invalidCase{Name: d.Name()}
		exp, err := os.ReadFile(filepath.Join(invalidDir, d.Name(), "expected.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(exp, &c); err != nil {
			t.Fatalf("%s/expected.yaml: %v", d.Name(), err)
		}
		if c.Policy, err = os.ReadFile(filepath.Join(invalidDir, d.Name(), "policy.yaml")); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, c)
	}
	if len(cases) < 50 {
		t.Fatalf("corpus has %d cases, want at least 50", len(cases))
	}
	return cases
}

// matches reports whether res holds the expected result.
func (c invalidCase) matches(res validate.Results) bool {
	for _, r := range res {
		if r.Severity == c.Severity && r.Field == c.Field && strings.Contains(r.Message, c.Message) {
			return true
		}
	}
	return false
}

func TestInvalidCorpus(t *testing.T) {
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	for _, c := range loadInvalidCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			p, res := pipeline.Validate(c.Policy, validate.Options{Now: now})
			if !res.HasErrors() {
				t.Fatalf("accepted (policy %v), results:\n%s", p != nil, res.Text(""))
			}
			if !c.matches(res) {
				t.Fatalf("want %s at %q containing %q, got:\n%s", c.Severity, c.Field, c.Message, res.Text(""))
			}
		})
	}
}
