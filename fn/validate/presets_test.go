package validate_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// presetWarnings lists the warnings (field paths) each shipped preset ("policies/x.yaml") is expected to draw on
// the reference date; a preset not listed must draw none. Update it when a preset
// deliberately carries a risk, so the risk is stated here rather than discovered in review.
var presetWarnings = map[string][]string{}

// TestPresetsRenderWithoutErrors: every policy shipped under policies/ decodes, validates
// with zero errors and exactly its expected warnings, and renders.
func TestPresetsRenderWithoutErrors(t *testing.T) {
	files, _ := filepath.Glob("../../policies/*.yaml")
	if len(files) < 5 {
		t.Fatalf("found %d presets under policies/, want at least 5", len(files))
	}
	examples, _ := filepath.Glob("../../examples/*/gpupolicy.yaml")
	files = append(files, examples...)
	for _, f := range files {
		t.Run(filepath.Base(filepath.Dir(f))+"/"+filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			_, objs, res := pipeline.Load(data, validate.Options{Now: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)})
			if res.HasErrors() || len(objs) == 0 {
				t.Fatalf("preset does not render:\n%s", res.Text(f))
			}
			var warned []string
			for _, r := range res {
				if r.Severity == validate.SeverityWarning {
					warned = append(warned, r.Field)
				}
			}
			if want := presetWarnings[filepath.Base(filepath.Dir(f))+"/"+filepath.Base(f)]; !slices.Equal(warned, want) {
				t.Errorf("warnings at %v, want %v:\n%s", warned, want, res.Text(f))
			}
		})
	}
}
