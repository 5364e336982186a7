package validate_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// today pins the lifecycle checks to the date the matrix facts were reviewed.
var today = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

const base = `apiVersion: gpupolicy.dev/v1alpha1
kind: GPUPolicy
metadata:
  name: fleet
spec:
  kubernetesVersion: "1.34"
  driver: {version: "580.95.05"}
  cuda: {version: "12.8"}
`

func load(t *testing.T, doc string) validate.Results {
	t.Helper()
	_, res := pipeline.Validate([]byte(doc), validate.Options{Now: today})
	return res
}

func TestValidPolicyHasNoProblems(t *testing.T) {
	if res := load(t, base); len(res) != 0 {
		t.Fatalf("want no results, got:\n%s", res.Text("policy.yaml"))
	}
}

func TestResultsAreOrderedAndComplete(t *testing.T) {
	res := load(t, strings.Replace(base, `"580.95.05"`, `"535.54.03"`, 1)+"  exporter: {port: 80}\n")
	txt := res.Text("p.yaml")
	t.Log(txt)
	if !res.HasErrors() || !strings.HasPrefix(txt, "p.yaml: error: spec.exporter.port:") || !strings.Contains(txt, "warning: spec.driver.version: driver branch R535") {
		t.Fatalf("unexpected text:\n%s", txt)
	}
}

// want is one expected result: severity, path and a message fragment.
type want struct {
	sev   validate.Severity
	field string
	msg   string
}

func has(res validate.Results, w want) bool {
	for _, r := range res {
		if r.Severity == w.sev && r.Field == w.field && strings.Contains(r.Message, w.msg) {
			return true
		}
	}
	return false
}

func TestWarningsWhereRisky(t *testing.T) {
	for name, tc := range map[string]struct {
		doc  string
		now  time.Time
		want []want
		none bool // no warnings at all expected
	}{
		"R535 past EOL": {
			doc:  strings.Replace(base, `"580.95.05"`, `"535.261.03"`, 1),
			want: []want{{validate.SeverityWarning, "spec.driver.version", "R535 (LTSB) reached end of life in 2026-06"}},
		},
		"R535 before EOL": {
			doc: strings.Replace(base, `"580.95.05"`, `"535.261.03"`, 1), now: time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC), none: true,
		},
		"R570 past EOL": {
			doc:  strings.Replace(base, `"580.95.05"`, `"570.195.03"`, 1),
			want: []want{{validate.SeverityWarning, "spec.driver.version", "R570 (PB) reached end of life in 2026-02"}},
		},
		"pool on a feature label": {
			doc:  base + "  nodePools:\n  - name: a100\n    nodeSelector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}\n",
			want: []want{{validate.SeverityWarning, "spec.nodePools[0].nodeSelector[nvidia.com/gpu.product]", "moves to this pool"}},
		},
		"newer containerd": {
			doc:  base + "  containerRuntime: {version: \"2.3\"}\n",
			want: []want{{validate.SeverityWarning, "spec.containerRuntime.version", "newer than the newest minor in the version matrix (2.2)"}},
		},
		"untested kubernetes": {
			doc:  strings.Replace(base, `"1.34"`, `"1.40"`, 1),
			want: []want{{validate.SeverityWarning, "spec.kubernetesVersion", "newer than the newest tested minor (1.37)"}},
		},
		"node-name claim beta": {
			doc:  strings.Replace(base, `"1.34"`, `"1.31"`, 1),
			want: []want{{validate.SeverityWarning, "spec.kubernetesVersion", "ServiceAccountTokenPodNodeInfo, which is beta"}},
		},
		"restart none, default runtime, no guardrails, old toolkit": {
			doc: base + "  containerRuntime: {restartMode: none}\n  toolkit: {setAsDefault: true, version: \"1.17.8\"}\n  guardrails: {enabled: false}\n",
			want: []want{
				{validate.SeverityWarning, "spec.containerRuntime.restartMode", "never restarted"},
				{validate.SeverityWarning, "spec.toolkit.setAsDefault", "every container"},
				{validate.SeverityWarning, "spec.guardrails.enabled", "any label of any node"},
				{validate.SeverityWarning, "spec.toolkit.version", "≥ 1.18.0"},
			},
		},
		"explicitly no tolerations": {
			doc:  base + "  tolerations: []\n",
			want: []want{{validate.SeverityWarning, "spec.tolerations", "drops the default toleration"}},
		},
		"pool inherits invalid settings once": {
			doc:  base + "  devicePlugin: {migStrategy: all}\n  nodePools:\n  - {name: a, nodeSelector: {pool: a}}\n",
			want: []want{{validate.SeverityError, "spec.devicePlugin.migStrategy", "not one of"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			now := tc.now
			if now.IsZero() {
				now = today
			}
			_, res := pipeline.Validate([]byte(tc.doc), validate.Options{Now: now})
			if tc.none && len(res) > 0 {
				t.Fatalf("want no results, got:\n%s", res.Text(""))
			}
			for _, w := range tc.want {
				if !has(res, w) {
					t.Errorf("missing %v in:\n%s", w, res.Text(""))
				}
			}
			if len(res) != len(tc.want) {
				t.Errorf("want exactly %d results, got:\n%s", len(tc.want), res.Text(""))
			}
		})
	}
}

// TestErrOnlyWithErrors: Err is set exactly when an error is present.
func TestErrOnlyWithErrors(t *testing.T) {
	res := validate.Results{
		{Severity: validate.SeverityWarning, Field: "spec.a", Message: "w"},
		{Severity: validate.SeverityError, Field: "spec.exporter.port", Value: 80, Message: "e"},
	}
	if res.Err() == nil || (validate.Results{res[0]}).Err() != nil {
		t.Fatal("Err must be set exactly when an error is present")
	}
}

// TestPoolJudgedOnWhatItSets: a node pool is validated on the values it writes, whether or not
// they equal spec.devicePlugin's; what it only inherits is reported once, at spec.devicePlugin
// (the "pool inherits invalid settings once" case above).
func TestPoolJudgedOnWhatItSets(t *testing.T) {
	for name, tc := range map[string]struct {
		doc  string
		want []want
	}{
		"pool repeats the base's invalid migStrategy": {
			doc: base + "  devicePlugin: {migStrategy: all}\n  nodePools:\n  - {name: a, nodeSelector: {pool: a}, devicePlugin: {migStrategy: all}}\n",
			want: []want{
				{validate.SeverityError, "spec.devicePlugin.migStrategy", "not one of"},
				{validate.SeverityError, "spec.nodePools[0].devicePlugin.migStrategy", "not one of"},
			},
		},
		"pool repeats the base's replicas": {
			doc: base + "  devicePlugin: {resourceName: nvidia.com/gpu.shared, sharing: {timeSlicing: {replicas: 100}}}\n  nodePools:\n  - {name: a, nodeSelector: {pool: a}, devicePlugin: {sharing: {timeSlicing: {replicas: 100}}}}\n",
			want: []want{
				{validate.SeverityWarning, "spec.devicePlugin.sharing.timeSlicing.replicas", "100 replicas per GPU"},
				{validate.SeverityWarning, "spec.nodePools[0].devicePlugin.sharing.timeSlicing.replicas", "100 replicas per GPU"},
			},
		},
		"pool repeats the base's ignoredXIDs": {
			doc: base + "  devicePlugin: {healthChecks: {ignoredXIDs: [0]}}\n  nodePools:\n  - {name: a, nodeSelector: {pool: a}, devicePlugin: {healthChecks: {ignoredXIDs: [0]}}}\n",
			want: []want{
				{validate.SeverityError, "spec.devicePlugin.healthChecks.ignoredXIDs[0]", "not an NVIDIA XID"},
				{validate.SeverityError, "spec.nodePools[0].devicePlugin.healthChecks.ignoredXIDs[0]", "not an NVIDIA XID"},
			},
		},
		"pool repeats the base's default resource name under time-slicing": {
			doc: base + "  devicePlugin: {sharing: {timeSlicing: {replicas: 4}}}\n  nodePools:\n  - {name: a, nodeSelector: {pool: a}, devicePlugin: {resourceName: nvidia.com/gpu, sharing: {timeSlicing: {replicas: 4}}}}\n",
			want: []want{
				{validate.SeverityInfo, "spec.devicePlugin.sharing.timeSlicing.replicas", "time-sliced replicas are advertised as nvidia.com/gpu"},
				{validate.SeverityInfo, "spec.nodePools[0].devicePlugin.sharing.timeSlicing.replicas", "time-sliced replicas are advertised as nvidia.com/gpu"},
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			res := load(t, tc.doc)
			for _, w := range tc.want {
				if !has(res, w) {
					t.Errorf("missing %v in:\n%s", w, res.Text(""))
				}
			}
			if len(res) != len(tc.want) {
				t.Errorf("want exactly %d results, got:\n%s", len(tc.want), res.Text(""))
			}
		})
	}
}

// An image tag may be 128 characters, not 129 (the reference grammar's [\w][\w.-]{0,127}).
func TestImageTagLength(t *testing.T) {
	for n, wantErr := range map[int]bool{1: false, 128: false, 129: true} {
		doc := base + "  images: {gpupolicy: \"ghcr.io/gpupolicy/gpupolicy:" + strings.Repeat("v", n) + "\"}\n"
		res := load(t, doc)
		got := false
		for _, r := range res {
			if r.Field == "spec.images.gpupolicy" && r.Severity == validate.SeverityError {
				got = true
			}
		}
		if got != wantErr {
			t.Errorf("tag of %d characters: error %v, want %v; results %v", n, got, wantErr, res)
		}
	}
}
