package stages

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpupolicy/gpupolicy/plugin/agent/gate"
	"github.com/gpupolicy/gpupolicy/plugin/agent/toolkit"
	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/nodefacts/hostfacts"
)

const sha = "8d32d3c0925e245d5953ad43921355a74d29789c2359fc6a101fd0d723c186e1"

func agentConfig() *config.Agent {
	return &config.Agent{
		Driver:      config.AgentDriver{Version: "580.95.05", Enforce: "branch"},
		CUDAVersion: "12.8",
		Toolkit:     config.AgentToolkit{RuntimeClassName: "nvidia", DropInSHA256: sha},
		Stages:      config.Stages{FeatureDiscovery: true},
	}
}

func writeDriver(t *testing.T, root, version string) {
	t.Helper()
	p := filepath.Join(root, hostfacts.KernelDriverFile)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	line := "NVRM version: NVIDIA UNIX x86_64 Kernel Module  " + version + "  Tue Sep 30 00:00:00 UTC 2025\n"
	if err := os.WriteFile(p, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The whole node life cycle through the real checks: entry, driver, toolkit, a driver of
// another branch (drift closes everything downstream), and the disabled exporter stage.
func TestStagesThroughGate(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1",
		Labels: map[string]string{config.LabelDeployExporter: "true"}}})
	r := &gate.Reconciler{Client: cs, Node: "n1", Checks: Checks(agentConfig()),
		ReadHost: func() hostfacts.Facts { return hostfacts.Read(root) },
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil))}
	labels := func() map[string]string {
		if _, err := r.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		n, _ := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		return n.Labels
	}
	// condition is the GPUStackReady status and reason the last reconcile left.
	condition := func() string {
		n, _ := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		for _, c := range n.Status.Conditions {
			if c.Type == config.ConditionGPUStackReady {
				return string(c.Status) + " " + c.Reason
			}
		}
		return "absent"
	}

	l := labels()
	if l[config.LabelDeployDriver] != "true" || l[config.LabelDeployToolkit] != "" || l[config.LabelDeployExporter] != "" {
		t.Fatalf("no driver yet: %v", l)
	}
	if c := condition(); c != "False "+config.ReasonDriverNotLoaded {
		t.Fatalf("no driver yet: condition %s", c)
	}
	writeDriver(t, root, "580.82.07") // same branch: gate opens, drift is labelled
	l = labels()
	if l[config.LabelDeployToolkit] != "true" || l[config.LabelDriverDrift] != "true" || l[config.LabelDriverVersion] != "580.82.07" || l[config.LabelDeployDevicePlugin] != "" {
		t.Fatalf("driver ok: %v", l)
	}
	st := toolkit.Status{Verified: true, Handlers: []string{"nvidia"}, DropInSHA256: "0000", ContainerdVersion: "1.7", VerifiedBy: "test", Time: time.Now()}
	if err := toolkit.WriteStatus(root, st); err != nil {
		t.Fatal(err)
	}
	if l = labels(); l[config.LabelToolkitReady] != "" {
		t.Fatalf("old drop-in opened the toolkit gate: %v", l)
	}
	if c := condition(); c != "False "+config.ReasonToolkitNotLoaded {
		t.Fatalf("old drop-in: condition %s", c)
	}
	// A failed install of this policy's drop-in keeps the gate closed even if the file names
	// the handler and the digest: only verified opens it.
	failed := toolkit.Status{Reason: "containerd refused the drop-in: boom", Handlers: []string{"nvidia"}, DropInSHA256: sha, Time: time.Now()}
	if err := toolkit.WriteStatus(root, failed); err != nil {
		t.Fatal(err)
	}
	if l = labels(); l[config.LabelToolkitReady] != "" {
		t.Fatalf("unverified status opened the toolkit gate: %v", l)
	}
	if res := ToolkitCheck(agentConfig())(&gate.Facts{Host: hostfacts.Read(root)}); res.Ready || res.Reason != "toolkit install failed: containerd refused the drop-in: boom" {
		t.Fatalf("failed status: %+v", res)
	}
	if c := condition(); c != "False "+config.ReasonToolkitInstallFailed {
		t.Fatalf("failed install: condition %s", c)
	}
	st.DropInSHA256 = sha
	if err := toolkit.WriteStatus(root, st); err != nil {
		t.Fatal(err)
	}
	l = labels()
	for _, k := range []string{config.LabelToolkitReady, config.LabelDeployDevicePlugin, config.LabelDeployFeatureDiscovery} {
		if l[k] != "true" {
			t.Fatalf("%s not open: %v", k, l)
		}
	}
	if _, has := l[config.LabelDeployExporter]; has {
		t.Fatalf("disabled exporter gate open: %v", l)
	}
	// The disabled exporter stage's never-ready check does not hold the condition back.
	if c := condition(); c != "True "+config.ReasonStackReady {
		t.Fatalf("full stack: condition %s", c)
	}
	writeDriver(t, root, "570.172.08")
	l = labels()
	if l[config.LabelDeployToolkit] != "" || l[config.LabelDeployDevicePlugin] != "" || l[config.LabelDeployDriver] != "true" {
		t.Fatalf("other branch must close downstream: %v", l)
	}
	n, _ := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if !strings.Contains(n.Annotations[config.AnnotationGateStatus], "570.172.08") {
		t.Fatalf("gate-status: %s", n.Annotations[config.AnnotationGateStatus])
	}
	if c := condition(); c != "False "+config.ReasonDriverDrift {
		t.Fatalf("other branch: condition %s", c)
	}
}

// TestChecksFollowTheGateTable pins the stage list the gate runs, for each combination of
// optional stages: the order, what each check opens, and that every check has a function.
func TestChecksFollowTheGateTable(t *testing.T) {
	for _, tc := range []struct {
		stages config.Stages
		want   map[string][]string
	}{
		{config.Stages{FeatureDiscovery: true, Exporter: true}, map[string][]string{
			StageEntry:          {config.LabelDeployDriver},
			config.StageDriver:  {config.LabelDeployToolkit},
			config.StageToolkit: {config.LabelToolkitReady, config.LabelDeployDevicePlugin, config.LabelDeployFeatureDiscovery, config.LabelDeployExporter},
			StageDisabled:       {config.LabelDeployMIGManager, config.LabelDeployMPSControlDaemon},
		}},
		{config.Stages{Exporter: true}, map[string][]string{
			StageEntry:          {config.LabelDeployDriver},
			config.StageDriver:  {config.LabelDeployToolkit},
			config.StageToolkit: {config.LabelToolkitReady, config.LabelDeployDevicePlugin, config.LabelDeployExporter},
			StageDisabled:       {config.LabelDeployMIGManager, config.LabelDeployMPSControlDaemon, config.LabelDeployFeatureDiscovery},
		}},
		{config.Stages{}, map[string][]string{
			StageEntry:          {config.LabelDeployDriver},
			config.StageDriver:  {config.LabelDeployToolkit},
			config.StageToolkit: {config.LabelToolkitReady, config.LabelDeployDevicePlugin},
			StageDisabled:       {config.LabelDeployMIGManager, config.LabelDeployMPSControlDaemon, config.LabelDeployFeatureDiscovery, config.LabelDeployExporter},
		}},
		// MIG: the toolkit check opens the MIG step, whose check opens the rest.
		{config.Stages{FeatureDiscovery: true, Exporter: true, MIG: true}, map[string][]string{
			StageEntry:             {config.LabelDeployDriver},
			config.StageDriver:     {config.LabelDeployToolkit},
			config.StageToolkit:    {config.LabelToolkitReady, config.LabelDeployMIGManager},
			config.StageMIGManager: {config.LabelDeployDevicePlugin, config.LabelDeployFeatureDiscovery, config.LabelDeployExporter},
			StageDisabled:          {config.LabelDeployMPSControlDaemon},
		}},
		// MPS: the check before it opens the daemon's gate, the MPS check the rest.
		{config.Stages{FeatureDiscovery: true, Exporter: true, MIG: true, MPS: true}, map[string][]string{
			StageEntry:                   {config.LabelDeployDriver},
			config.StageDriver:           {config.LabelDeployToolkit},
			config.StageToolkit:          {config.LabelToolkitReady, config.LabelDeployMIGManager},
			config.StageMIGManager:       {config.LabelDeployMPSControlDaemon},
			config.StageMPSControlDaemon: {config.LabelDeployDevicePlugin, config.LabelDeployFeatureDiscovery, config.LabelDeployExporter},
		}},
	} {
		cfg := agentConfig()
		cfg.Stages = tc.stages
		checks := Checks(cfg)
		order := []string{StageEntry, config.StageDriver, config.StageToolkit}
		if tc.stages.MIG {
			order = append(order, config.StageMIGManager)
		}
		if tc.stages.MPS {
			order = append(order, config.StageMPSControlDaemon)
		}
		if _, ok := tc.want[StageDisabled]; ok {
			order = append(order, StageDisabled)
		}
		if len(checks) != len(order) {
			t.Fatalf("%+v: %d checks, want %v", tc.stages, len(checks), order)
		}
		for i, c := range checks {
			if c.Stage != order[i] || !slices.Equal(c.Opens, tc.want[c.Stage]) {
				t.Errorf("%+v: check %d is %s opening %v, want %s opening %v", tc.stages, i, c.Stage, c.Opens, order[i], tc.want[order[i]])
			}
			if c.Check == nil && c.Stage != StageEntry {
				t.Errorf("%+v: stage %s has no check function", tc.stages, c.Stage)
			}
		}
	}
}

// One pass reads its facts once: with a pool driver and the MIG step (two checks that read
// the Node), the reconcile still GETs the Node once and patches from that read.
func TestOnePassReadsTheNodeOnce(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	writeDriver(t, root, "570.195.03")
	cfg := agentConfig()
	cfg.Stages.MIG = true
	cfg.NodePools = []config.AgentPool{{Name: "training", NodeSelector: map[string]string{"pool": "training"},
		Driver: &config.AgentDriver{Version: "570.195.03", Enforce: "exact"},
		MIG:    &config.AgentMIG{Layout: "balanced", Layouts: []string{"balanced"}, ConfigFile: "training.yaml"}}}
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"pool": "training"}}})
	r := &gate.Reconciler{Client: cs, Node: "n1", Checks: Checks(cfg),
		ReadHost: func() hostfacts.Facts { return hostfacts.Read(root) },
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil))}
	status, err := r.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !status[config.StageDriver].Ready {
		t.Fatalf("the pool's driver must pass: %+v", status)
	}
	gets := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "nodes" {
			gets++
		}
	}
	if gets != 1 {
		t.Fatalf("%d GETs of the Node in one pass, want 1: %v", gets, cs.Actions())
	}
}
