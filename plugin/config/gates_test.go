package config

import (
	"slices"
	"testing"
)

// The agent opens labels check by check in table order, and doctor reads the table in its
// own order, so the table must list the gates in the order their checks run.
func TestGatesFollowTheCheckOrder(t *testing.T) {
	checks := EnabledChecks(Stages{FeatureDiscovery: true, Exporter: true, MIG: true, MPS: true}) // every check
	last, seen := -1, map[string]bool{}
	for _, g := range Gates {
		i := slices.Index(checks, g.OpenedBy) // -1 for the entry gate
		if g.OpenedBy != "" && i < 0 {
			t.Errorf("%s is opened by %q, which is not a check", g.Label, g.OpenedBy)
		}
		if i < last {
			t.Errorf("%s (opened by %q) is listed after a gate of a later check", g.Label, g.OpenedBy)
		}
		last = i
		if seen[g.Label] || seen[g.Name] {
			t.Errorf("%s / %s twice in the table", g.Name, g.Label)
		}
		seen[g.Label], seen[g.Name] = true, true
	}
}

func TestGateLabels(t *testing.T) {
	all := Stages{FeatureDiscovery: true, Exporter: true}
	mig := Stages{FeatureDiscovery: true, Exporter: true, MIG: true}
	mps := Stages{FeatureDiscovery: true, Exporter: true, MPS: true}
	every := Stages{FeatureDiscovery: true, Exporter: true, MIG: true, MPS: true}
	for _, tc := range []struct {
		openedBy string
		stages   Stages
		want     []string
	}{
		{"", all, []string{LabelDeployDriver}},
		{StageDriver, all, []string{LabelDeployToolkit}},
		// Without MIG its check is not run: the toolkit check opens what it would have.
		{StageToolkit, all, []string{LabelToolkitReady, LabelDeployDevicePlugin, LabelDeployFeatureDiscovery, LabelDeployExporter}},
		{StageToolkit, Stages{Exporter: true}, []string{LabelToolkitReady, LabelDeployDevicePlugin, LabelDeployExporter}},
		{StageMIGManager, all, nil},
		// With MIG the toolkit check opens the MIG step, whose check opens the rest.
		{StageToolkit, mig, []string{LabelToolkitReady, LabelDeployMIGManager}},
		{StageMIGManager, mig, []string{LabelDeployDevicePlugin, LabelDeployFeatureDiscovery, LabelDeployExporter}},
		// With MPS the MPS check opens the device plugin and what follows it, after the check
		// before it opened the daemon's gate.
		{StageToolkit, mps, []string{LabelToolkitReady, LabelDeployMPSControlDaemon}},
		{StageMPSControlDaemon, mps, []string{LabelDeployDevicePlugin, LabelDeployFeatureDiscovery, LabelDeployExporter}},
		{StageMIGManager, every, []string{LabelDeployMPSControlDaemon}},
		{StageMPSControlDaemon, every, []string{LabelDeployDevicePlugin, LabelDeployFeatureDiscovery, LabelDeployExporter}},
	} {
		if got := GateLabels(tc.openedBy, tc.stages); !slices.Equal(got, tc.want) {
			t.Errorf("GateLabels(%q, %+v) = %v, want %v", tc.openedBy, tc.stages, got, tc.want)
		}
	}
	if got := DisabledGateLabels(Stages{}); !slices.Equal(got, []string{LabelDeployMIGManager, LabelDeployMPSControlDaemon, LabelDeployFeatureDiscovery, LabelDeployExporter}) {
		t.Errorf("DisabledGateLabels(none) = %v", got)
	}
	if got := DisabledGateLabels(every); got != nil {
		t.Errorf("DisabledGateLabels(all) = %v", got)
	}
	if got := EnabledChecks(all); !slices.Equal(got, []string{StageDriver, StageToolkit}) {
		t.Errorf("EnabledChecks(no MIG) = %v", got)
	}
	if got := EnabledChecks(mig); !slices.Equal(got, []string{StageDriver, StageToolkit, StageMIGManager}) {
		t.Errorf("EnabledChecks(MIG) = %v", got)
	}
	if got := EnabledChecks(every); !slices.Equal(got, []string{StageDriver, StageToolkit, StageMIGManager, StageMPSControlDaemon}) {
		t.Errorf("EnabledChecks(MIG and MPS) = %v", got)
	}
}

// Every check has doctor's fix, every stage with a DaemonSet a rollout stage and a health
// rule, and the rollout stages come out in the order the README and the waves use.
func TestStageTableIsComplete(t *testing.T) {
	for _, g := range Gates {
		if g.Check && g.Fix == "" {
			t.Errorf("check %s has no Fix for doctor", g.Name)
		}
		if len(g.DaemonSets) > 0 && (g.Rollout == "" || g.Health == "") {
			t.Errorf("stage %s has DaemonSets but no rollout stage or health rule", g.Name)
		}
	}
	want := []string{RolloutPrereqs, RolloutDriver, RolloutToolkit, RolloutDevicePlugin, RolloutObservability}
	if got := RolloutStages(); !slices.Equal(got, want) {
		t.Errorf("RolloutStages() = %v, want %v", got, want)
	}
	if got := FixFor(EntryFix, map[string]string{"node": "gpu-a", "entry": "x=y", "onNode": "kubectl"}); got != "the node agent has not admitted gpu-a: check that it carries the entry labels x=y and that a gpu-node-agent pod runs there (kubectl)" {
		t.Errorf("FixFor: %s", got)
	}
}

// The MIG step closes what it opens while it repartitions: the programs holding NVML handles,
// the MPS control daemon's included, and those behind the MPS check.
func TestLabelsOpenedByMIGStep(t *testing.T) {
	want := []string{LabelDeployMPSControlDaemon, LabelDeployDevicePlugin, LabelDeployFeatureDiscovery, LabelDeployExporter}
	if got := LabelsOpenedBy(StageMIGManager); !slices.Equal(got, want) {
		t.Fatalf("LabelsOpenedBy(%s) = %v, want %v", StageMIGManager, got, want)
	}
}
