package config

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// operatorStateLabels reads the GPU Operator's own list of the labels it puts on GPU nodes
// (gpuStateLabels and migManagerLabelKey in controllers/state_manager.go) from the module the
// importer decodes ClusterPolicies with, so a label NVIDIA adds fails this test.
func operatorStateLabels(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/NVIDIA/gpu-operator").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -m github.com/NVIDIA/gpu-operator: %v\n%s", err, out)
	}
	src := filepath.Join(strings.TrimSpace(string(out)), "controllers", "state_manager.go")
	f, err := parser.ParseFile(token.NewFileSet(), src, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ValueSpec:
			name := n.Names[0].Name
			if name != "gpuStateLabels" && name != "migManagerLabelKey" {
				return true
			}
			ast.Inspect(n, func(m ast.Node) bool {
				if lit, ok := m.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, _ := strconv.Unquote(lit.Value); strings.HasPrefix(s, LabelDeployPrefix) {
						labels = append(labels, s)
					}
				}
				return true
			})
		}
		return true
	})
	if len(labels) < 10 {
		t.Fatalf("%s: found only %v; has the operator moved its state labels?", src, labels)
	}
	slices.Sort(labels)
	return slices.Compact(labels)
}

// Every label the operator writes is either a gate of the stage table (adopted at hand-over)
// or an operator-only label (removed at hand-over), and the list names nothing the operator
// does not write.
func TestOperatorLabelsAreKnown(t *testing.T) {
	ours := map[string]bool{}
	for _, g := range Gates {
		ours[g.Label] = true
	}
	theirs := operatorStateLabels(t)
	for _, l := range theirs {
		if !ours[l] && !slices.Contains(OperatorOnlyLabels, l) {
			t.Errorf("the GPU Operator writes %s, which is neither a stage gate nor in OperatorOnlyLabels", l)
		}
	}
	for _, l := range OperatorOnlyLabels {
		if !slices.Contains(theirs, l) {
			t.Errorf("OperatorOnlyLabels has %s, which the GPU Operator does not write", l)
		}
		if ours[l] {
			t.Errorf("%s is both a stage gate and operator-only", l)
		}
	}
	if !slices.IsSorted(OperatorOnlyLabels) {
		t.Error("OperatorOnlyLabels is not sorted")
	}
}

func TestOperator(t *testing.T) {
	managed := map[string]string{LabelGPUPresent: "true", LabelDeployDriver: "true", LabelOperatorValidator: "true", LabelDeployPrefix + "dcgm": "true"}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   OperatorState
		says   string
	}{
		{"no operator", map[string]string{LabelGPUPresent: "true", LabelDeployDriver: "true"}, OperatorAbsent, ""},
		{"managed", managed, OperatorManaged, LabelOperatorValidator + "=true"},
		{"only a dcgm label left", map[string]string{LabelDeployPrefix + "dcgm": "true"}, OperatorManaged, "dcgm=true"},
		{"operands true is still managed", merge(managed, LabelOperatorOperands, "true"), OperatorManaged, "handed over with"},
		{"handed over", merge(managed, LabelOperatorOperands, "false"), OperatorHandedOver, "dcgm"},
		// The switch alone, after the agent cleaned up: gpupolicy's node.
		{"switch only", map[string]string{LabelOperatorOperands: "false"}, OperatorAbsent, ""},
	} {
		got, why := Operator(tc.labels)
		if got != tc.want || !strings.Contains(why, tc.says) {
			t.Errorf("%s: Operator = %v %q, want %v containing %q", tc.name, got, why, tc.want, tc.says)
		}
	}
}

func merge(m map[string]string, k, v string) map[string]string {
	out := maps.Clone(m)
	out[k] = v
	return out
}
