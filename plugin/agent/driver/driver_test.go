package driver

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

func TestCompare(t *testing.T) {
	pol := func(enforce string) config.AgentDriver {
		return config.AgentDriver{Version: "580.95.05", Enforce: enforce}
	}
	cases := []struct {
		name             string
		enforce, found   string
		nv               *NVMLVersions
		satisfied, drift bool
		reasonContains   string
	}{
		{"exact match", EnforceExact, "580.95.05", nil, true, false, "driver 580.95.05"},
		{"exact patch drift", EnforceExact, "580.82.07", nil, false, true, "drift"},
		{"branch patch drift", EnforceBranch, "580.82.07", nil, true, true, "drift"},
		{"branch other branch", EnforceBranch, "570.172.08", nil, false, true, "expects 580.95.05"},
		{"none other branch", EnforceNone, "550.54.15", nil, true, true, "enforce none"},
		{"nvml mismatch", EnforceBranch, "580.95.05", &NVMLVersions{Driver: "580.82.07", CUDA: "13.0"}, false, false, "user-space and kernel driver differ"},
		{"cuda too new for driver", EnforceBranch, "580.95.05", &NVMLVersions{Driver: "580.95.05", CUDA: "12.4"}, false, false, "supports CUDA up to 12.4"},
		{"nvml agrees", EnforceExact, "580.95.05", &NVMLVersions{Driver: "580.95.05", CUDA: "13.0"}, true, false, ""},
		{"bad enforce", "strict", "580.95.05", nil, false, false, "not exact|branch|none"},
		// Versions compare as numbers: a patch spelt without its leading zero is the same driver,
		// and a branch is the major number, not a string prefix.
		{"exact numeric", EnforceExact, "580.95.5", nil, true, false, "driver 580.95.5"},
		{"branch numeric", EnforceBranch, "5800.95.05", nil, false, true, "drift"},
		{"nvml numeric", EnforceExact, "580.95.05", &NVMLVersions{Driver: "580.95.5", CUDA: "13.0"}, true, false, ""},
		{"odd found", EnforceBranch, "58.1", nil, false, true, "not an NVIDIA driver version"},
		{"odd found, enforce none", EnforceNone, "58.1", nil, true, true, "not an NVIDIA driver version"},
	}
	for _, c := range cases {
		v := Compare(pol(c.enforce), "12.8", c.found, c.nv)
		if v.Satisfied != c.satisfied || v.Drift != c.drift || !strings.Contains(v.Reason, c.reasonContains) {
			t.Errorf("%s: %+v", c.name, v)
		}
	}
}

// TestCheckModules: the loaded module's flavour against driver.kernelModuleType; the label
// carries what is loaded whatever the policy asks.
func TestCheckModules(t *testing.T) {
	for _, c := range []struct {
		name, want, enforce, found string
		satisfied, drift           bool
	}{
		{"auto takes open", "auto", EnforceBranch, "open", true, false},
		{"unset takes proprietary", "", EnforceBranch, "proprietary", true, false},
		{"open asked, open loaded", "open", EnforceBranch, "open", true, false},
		{"open asked, proprietary loaded", "open", EnforceBranch, "proprietary", false, true},
		{"proprietary asked, open loaded", "proprietary", EnforceExact, "open", false, true},
		{"enforce none only labels it", "open", EnforceNone, "proprietary", true, true},
		{"unknown flavour is not judged", "open", EnforceBranch, "", true, false},
	} {
		pol := config.AgentDriver{Version: "580.95.05", Enforce: c.enforce, KernelModules: c.want}
		v := Compare(pol, "12.8", "580.95.05", nil)
		v.CheckModules(pol, c.found)
		labels, annotations := v.Labels()
		if v.Satisfied != c.satisfied || v.Drift != c.drift || labels[config.LabelDriverKernelModules] != c.found {
			t.Errorf("%s: %+v labels %v", c.name, v, labels)
		}
		if c.drift && (!strings.Contains(v.Reason, "the "+c.found+" kernel module is loaded, the policy asks for "+c.want) ||
			!strings.Contains(annotations[config.AnnotationDriverDrift], c.found+" kernel module")) {
			t.Errorf("%s: reason %q, annotation %q", c.name, v.Reason, annotations[config.AnnotationDriverDrift])
		}
	}
}

func TestQueryNVMLDGXA100(t *testing.T) {
	m, err := gpumock.New("dgxa100", gpumock.WithDriverVersion("580.95.05"), gpumock.WithCUDADriverVersion(13000))
	if err != nil {
		t.Fatal(err)
	}
	got, err := QueryNVML(m)
	if err != nil || got.Driver != "580.95.05" || got.CUDA != "13.0" {
		t.Fatalf("%+v %v", got, err)
	}
	m.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNINITIALIZED }
	if _, err := QueryNVML(m); err == nil || !strings.Contains(err.Error(), "SystemGetDriverVersion") {
		t.Fatalf("driver call error: %v", err)
	}
	m, _ = gpumock.New("dgxa100")
	m.SystemGetCudaDriverVersionFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	if _, err := QueryNVML(m); err == nil || !strings.Contains(err.Error(), "SystemGetCudaDriverVersion") {
		t.Fatalf("cuda call error: %v", err)
	}
}

func TestPublishDriftLabelsAndEvents(t *testing.T) {
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", Labels: map[string]string{"team": "ml"}}}
	cs := fake.NewClientset(node)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	pol := config.AgentDriver{Version: "580.95.05", Enforce: EnforceBranch}
	events := func() []corev1.Event {
		l, _ := cs.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		return l.Items
	}

	drifted := Compare(pol, "", "580.82.07", nil)
	for range 2 { // the second publish changes nothing and posts nothing
		if err := Publish(ctx, cs, "gpu-1", drifted, log); err != nil {
			t.Fatal(err)
		}
	}
	n, _ := cs.CoreV1().Nodes().Get(ctx, "gpu-1", metav1.GetOptions{})
	if n.Labels[config.LabelDriverVersion] != "580.82.07" || n.Labels[config.LabelDriverDrift] != "true" || n.Labels["team"] != "ml" {
		t.Fatalf("labels %v", n.Labels)
	}
	if a := n.Annotations[config.AnnotationDriverDrift]; a != "expected 580.95.05 (enforce branch), found 580.82.07" {
		t.Fatalf("annotation %q", a)
	}
	if ev := events(); len(ev) != 1 || ev[0].Reason != "DriverDrift" || ev[0].Type != corev1.EventTypeWarning || ev[0].InvolvedObject.Name != "gpu-1" {
		t.Fatalf("events %+v", ev)
	}

	if err := Publish(ctx, cs, "gpu-1", Compare(pol, "", "580.95.05", nil), log); err != nil {
		t.Fatal(err)
	}
	n, _ = cs.CoreV1().Nodes().Get(ctx, "gpu-1", metav1.GetOptions{})
	if _, has := n.Labels[config.LabelDriverDrift]; has || n.Annotations[config.AnnotationDriverDrift] != "" {
		t.Fatalf("drift not cleared: %v %v", n.Labels, n.Annotations)
	}
	if ev := events(); len(ev) != 2 {
		t.Fatalf("want a DriverDriftResolved event, got %d events", len(ev))
	}
}

func TestHealth(t *testing.T) {
	var h Health
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != 503 {
		t.Fatalf("before first check: %d", rec.Code)
	}
	h.Set(true, "driver 580.95.05")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "580.95.05") {
		t.Fatalf("ok: %d %s", rec.Code, rec.Body)
	}
}
