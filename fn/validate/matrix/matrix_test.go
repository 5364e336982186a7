package matrix

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/gpupolicy/gpupolicy/fn/testing/goldentree"
)

func TestEmbeddedMatrixIsSourcedAndHoldsTheFacts(t *testing.T) {
	m := Default()
	for major, want := range map[int]string{11: "450.80.02", 12: "525.60.13", 13: "580.65.06"} {
		if c, ok := m.CUDAMajor(major); !ok || c.MinDriver != want {
			t.Errorf("CUDA %d: min driver %q, want %q", major, c.MinDriver, want)
		}
	}
	for _, tc := range []struct {
		minor         string
		ok, exact     bool
		configVersion int
		merge, cdi    bool
	}{
		{"1.5", false, false, 0, false, false},
		{"1.6", true, true, 2, false, false},
		{"1.7", true, true, 2, false, true},
		{"2.0", true, true, 3, false, true},
		{"2.1", true, true, 3, true, true},
		{"2.2", true, true, 3, true, true},
		{"1.8", false, false, 0, false, false},
		{"1.10", false, false, 0, false, false},
		{"2.4", true, false, 3, true, true},
	} {
		c, exact, ok := m.ContainerdMinor(MustParse(tc.minor))
		if ok != tc.ok || exact != tc.exact || c.ConfigVersion != tc.configVersion || c.ImportsMergePluginTables != tc.merge || c.CDI != tc.cdi {
			t.Errorf("containerd %s = %+v exact=%v ok=%v", tc.minor, c, exact, ok)
		}
	}
	for _, f := range []string{FeatureCDI, FeatureConfigV3, FeatureContainerdDropIn} {
		if _, ok := m.Feature(f); !ok {
			t.Errorf("toolkit feature %s missing", f)
		}
	}
	if len(m.KubernetesFeatures("guardrails")) != 2 {
		t.Error("guardrails must depend on ValidatingAdmissionPolicy and the node-name claim")
	}
}

func TestLoadRejectsUnsourcedOrUnknownFacts(t *testing.T) {
	for name, doc := range map[string]string{
		"no source":     "cuda: [{major: 12, minDriver: \"525.60.13\"}]\ncontainerd: [{minor: \"1.7\", configVersion: 2, source: x}]\ntoolkit: [{feature: cdi, minVersion: \"1.12.0\", source: x}]\nkubernetes: {minimum: \"1.29\", minimumSource: x, newestTested: \"1.37\", newestTestedSource: x}\n",
		"unknown field": "cuda: [{major: 12, minDriver: \"525.60.13\", source: x, note: y}]\n",
		"unordered":     "cuda: [{major: 12, minDriver: \"525.60.13\", source: x}]\ncontainerd: [{minor: \"2.0\", configVersion: 3, source: x}, {minor: \"1.7\", configVersion: 2, source: x}]\ntoolkit: [{feature: cdi, minVersion: \"1.12.0\", source: x}]\nkubernetes: {minimum: \"1.29\", minimumSource: x, newestTested: \"1.37\", newestTestedSource: x}\n",
	} {
		if _, err := Load([]byte(doc)); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
}

func TestBranchLifecycle(t *testing.T) {
	r535, _ := Default().Branch(535)
	if r535.PastEOL(time.Date(2026, 6, 30, 23, 0, 0, 0, time.UTC)) {
		t.Error("R535 is supported through June 2026")
	}
	if !r535.PastEOL(time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)) {
		t.Error("R535 is past EOL in July 2026")
	}
}

func TestVersionCompare(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{{"12.10", "12.9", 1}, {"535.261.03", "535.54.03", 1}, {"580.65.06", "580.65.6", 0}, {"1.7", "1.7.0", 0}, {"2.0", "1.7", 1}} {
		if got := MustParse(tc.a).Compare(MustParse(tc.b)); got != tc.want {
			t.Errorf("%s vs %s = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
	for _, bad := range []string{"", "1..2", "v1.2", "1.2.3.4.5", "1.x", "1234567890"} {
		if _, err := ParseVersion(bad); err == nil || strings.TrimSpace(err.Error()) == "" {
			t.Errorf("ParseVersion(%q) accepted", bad)
		}
	}
}

var update = flag.Bool("update", false, "rewrite MATRIX.md from matrix.yaml")

func TestMatrixMarkdownIsCurrent(t *testing.T) {
	goldentree.File(t, "MATRIX.md", Default().Markdown(), *update)
}
