package policies

import (
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/render"
	"github.com/gpupolicy/gpupolicy/fn/testing/goldentree"
	"github.com/gpupolicy/gpupolicy/fn/testing/manifestcheck"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

var update = flag.Bool("update", false, "rewrite testdata/<preset>/ from the renderer")

// now pins "today" for the driver-branch lifecycle checks, so the presets' results do not
// change with the calendar.
var now = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

// fluxPath is where the golden flux trees claim to live in a Git repository.
const fluxPath = "clusters/example/gpu"

type preset struct {
	name string // file name without .yaml
	data []byte
}

func presets(t *testing.T) []preset {
	t.Helper()
	paths, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	if len(paths) < 5 {
		t.Fatalf("want at least five presets, found %v", paths)
	}
	var out []preset
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, preset{name: strings.TrimSuffix(p, ".yaml"), data: b})
	}
	return out
}

// renderPreset runs the pipeline the CLI runs and returns the rendered tree.
func renderPreset(t *testing.T, p preset) (*v1alpha1.GPUPolicy, map[string][]byte) {
	t.Helper()
	pol, objs, res := pipeline.Load(p.data, validate.Options{Now: now})
	if res.HasErrors() {
		t.Fatalf("%s.yaml:\n%s", p.name, res.Text(p.name+".yaml"))
	}
	for _, r := range res {
		t.Logf("%s.yaml: %s: %s: %s", p.name, r.Severity, r.Field, r.Message)
	}
	opts := render.DefaultFileOptions()
	opts.FluxPath = fluxPath
	files, err := render.Files(pol, objs, opts)
	if err != nil {
		t.Fatal(err)
	}
	return pol, files
}

// TestPresetsDecodeStrictly: every preset is a valid, strictly decodable policy whose
// defaulting keeps what the preset chose.
func TestPresetsDecodeStrictly(t *testing.T) {
	for _, p := range presets(t) {
		t.Run(p.name, func(t *testing.T) {
			pol, err := v1alpha1.Decode(p.data)
			if err != nil {
				t.Fatal(err)
			}
			if pol.Metadata.Name != p.name && pol.Metadata.Name != strings.ReplaceAll(p.name, ".", "-") {
				t.Errorf("metadata.name %q: name a preset after its file (%s)", pol.Metadata.Name, p.name)
			}
			chosen, written := pol.Spec, validate.WrittenOf(pol)
			v1alpha1.Default(pol)
			if chosen.ContainerRuntime.Version != "" && pol.Spec.ContainerRuntime.Version != chosen.ContainerRuntime.Version {
				t.Error("defaulting changed containerRuntime.version")
			}
			if res := validate.Policy(pol, written, validate.Options{Now: now}); res.HasErrors() {
				t.Fatal(res.Text(p.name + ".yaml"))
			}
		})
	}
}

// TestRenderedUpToDate compares every preset's rendered tree with testdata/<preset>/.
func TestRenderedUpToDate(t *testing.T) {
	for _, p := range presets(t) {
		t.Run(p.name, func(t *testing.T) {
			_, files := renderPreset(t, p)
			goldentree.Tree(t, filepath.Join("testdata", p.name), files, *update)
		})
	}
}

// TestRenderDeterministic renders every preset twice; the trees must be byte-identical.
func TestRenderDeterministic(t *testing.T) {
	for _, p := range presets(t) {
		_, a := renderPreset(t, p)
		_, b := renderPreset(t, p)
		if len(a) != len(b) {
			t.Fatalf("%s: %d vs %d files", p.name, len(a), len(b))
		}
		for k, v := range a {
			if string(b[k]) != string(v) {
				t.Errorf("%s: %s differs between two renders", p.name, k)
			}
		}
	}
}

// TestRenderedObjectsStrict decodes every object of every committed preset tree strictly into
// its k8s.io/api type and checks the containerd drop-in's TOML and config version.
func TestRenderedObjectsStrict(t *testing.T) {
	for _, p := range presets(t) {
		t.Run(p.name, func(t *testing.T) {
			pol, _ := renderPreset(t, p)
			objs, errs := manifestcheck.DecodeTree(filepath.Join("testdata", p.name))
			for _, err := range errs {
				t.Error(err)
			}
			if err := manifestcheck.CheckDropIn(objs, pol.Spec.ContainerRuntime.Version, pol.Spec.Toolkit.RuntimeClassName); err != nil {
				t.Error(err)
			}
		})
	}
}

// expectedResults are the non-error results each preset must produce, as "severity field".
// A preset is a recommendation: a new warning on one is a finding to act on (fix the preset or
// the matrix), not noise, so the list is exact.
var expectedResults = map[string][]string{
	"air-gapped-mirror":           {"info spec.containerRuntime.version"},
	"containerd-2-cdi":            nil,
	"driver-container":            {"info spec.containerRuntime.version"},
	"dra-training":                nil,
	"inference-training-pools":    nil,
	"mps-inference":               nil,
	"preinstalled-containerd-1.7": {"info spec.containerRuntime.version"},
}

func TestPresetResults(t *testing.T) {
	for _, p := range presets(t) {
		want, ok := expectedResults[p.name]
		if !ok {
			t.Errorf("%s: add the preset to expectedResults", p.name)
			continue
		}
		_, res := pipeline.Validate(p.data, validate.Options{Now: now})
		var got []string
		for _, r := range res {
			got = append(got, string(r.Severity)+" "+r.Field)
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s.yaml: results\n%s\nwant\n%s\n%s", p.name, strings.Join(got, "\n"), strings.Join(want, "\n"), res.Text(p.name+".yaml"))
		}
	}
}
