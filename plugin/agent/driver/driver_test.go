package driver

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

// hostWithDriver writes a /proc/driver/nvidia/version under a fake host root.
func hostWithDriver(t *testing.T, line string) string {
	t.Helper()
	root := t.TempDir()
	p := filepath.Join(root, ProcVersionFile)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(line+"\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestKernelVersion(t *testing.T) {
	for line, want := range map[string]string{
		"NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 30 00:00:00 UTC 2025":                          "580.95.05",
		"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.172.08  Release Build  (dvs-builder@U16-I3-B03-4-3)": "570.172.08",
		"NVRM version: NVIDIA UNIX aarch64 Kernel Module  550.54  Thu Feb 22 01:44:30 UTC 2024":                            "550.54",
	} {
		got, err := KernelVersion(hostWithDriver(t, line))
		if err != nil || got != want {
			t.Errorf("%q: %q %v, want %q", line, got, err, want)
		}
	}
	if _, err := KernelVersion(t.TempDir()); err != ErrNoDriver {
		t.Errorf("missing file: %v", err)
	}
	if _, err := KernelVersion(hostWithDriver(t, "garbage")); err == nil || !strings.Contains(err.Error(), "no driver version") {
		t.Errorf("garbage: %v", err)
	}
}

// The version file is read inside the host root: a link there (here /proc/driver/nvidia, as a
// driver container may leave it) leads to the host's file, never to this container's.
func TestKernelVersionThroughLink(t *testing.T) {
	root := hostWithDriver(t, "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 30 00:00:00 UTC 2025")
	nvidia := filepath.Join(root, filepath.Dir(ProcVersionFile))
	if err := os.MkdirAll(filepath.Join(root, "/run"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(nvidia, filepath.Join(root, "/run/nvidia-proc")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/run/nvidia-proc", nvidia); err != nil {
		t.Fatal(err)
	}
	if got, err := KernelVersion(root); err != nil || got != "580.95.05" {
		t.Fatalf("through an absolute link: %q %v", got, err)
	}
	if err := os.RemoveAll(filepath.Join(root, "/run/nvidia-proc")); err != nil {
		t.Fatal(err)
	}
	if _, err := KernelVersion(root); err == nil || !strings.Contains(err.Error(), "symbolic link /proc/driver/nvidia -> /run/nvidia-proc points to nothing") {
		t.Fatalf("dangling link: %v", err)
	}
}

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
