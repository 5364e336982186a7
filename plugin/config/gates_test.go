package config

import (
	"slices"
	"testing"
)

// The agent opens labels check by check in GateChecks order, and doctor reads the table in
// its own order, so the table must list the gates in the order their checks run.
func TestGatesFollowTheCheckOrder(t *testing.T) {
	last, seen := -1, map[string]bool{}
	for _, g := range Gates {
		i := slices.Index(GateChecks, g.OpenedBy) // -1 for the entry gate
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
	for _, tc := range []struct {
		openedBy string
		stages   Stages
		want     []string
	}{
		{"", all, []string{LabelDeployDriver}},
		{StageDriver, all, []string{LabelDeployToolkit}},
		{StageToolkit, all, []string{LabelToolkitReady, LabelDeployDevicePlugin, LabelDeployFeatureDiscovery, LabelDeployExporter}},
		{StageToolkit, Stages{Exporter: true}, []string{LabelToolkitReady, LabelDeployDevicePlugin, LabelDeployExporter}},
	} {
		if got := GateLabels(tc.openedBy, tc.stages); !slices.Equal(got, tc.want) {
			t.Errorf("GateLabels(%q, %+v) = %v, want %v", tc.openedBy, tc.stages, got, tc.want)
		}
	}
	if got := DisabledGateLabels(Stages{}); !slices.Equal(got, []string{LabelDeployFeatureDiscovery, LabelDeployExporter}) {
		t.Errorf("DisabledGateLabels(none) = %v", got)
	}
	if got := DisabledGateLabels(all); got != nil {
		t.Errorf("DisabledGateLabels(all) = %v", got)
	}
}
