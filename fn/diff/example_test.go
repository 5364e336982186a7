package diff

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestGitHubActionsExample keeps examples/github-actions/workflow.yaml honest: it parses as a
// workflow, every run script is valid bash, and it and its gpupolicy-pr.sh use the commands
// and flags this package and the render CLI define.
func TestGitHubActionsExample(t *testing.T) {
	data, err := os.ReadFile("../../examples/github-actions/workflow.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		Jobs map[string]struct {
			Steps []struct {
				Name string `json:"name"`
				Uses string `json:"uses"`
				Run  string `json:"run"`
			} `json:"steps"`
		} `json:"jobs"`
	}
	if err := yaml.Unmarshal(data, &wf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "\non:\n  pull_request:") || len(wf.Jobs) != 1 {
		t.Fatalf("want one job on pull_request, got %+v", wf)
	}
	var all strings.Builder
	for _, job := range wf.Jobs {
		for _, s := range job.Steps {
			if s.Run == "" {
				continue
			}
			all.WriteString(s.Run)
			if _, err := exec.LookPath("bash"); err != nil {
				continue
			}
			cmd := exec.Command("bash", "-n")
			cmd.Stdin = strings.NewReader(s.Run)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("step %q is not valid bash: %v\n%s", s.Name, err, out)
			}
		}
	}
	// The per-policy logic is the script beside it (examples/github_actions_test.go runs it).
	script, err := os.ReadFile("../../examples/github-actions/gpupolicy-pr.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"gpupolicy-fn render -f", ".github/gpupolicy-pr.sh diff ", ".github/gpupolicy-pr.sh verdict ", "gh pr comment"} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("workflow lacks %q", want)
		}
	}
	for _, want := range []string{`"$fn" diff --fail-on none`, "--fail-on warning", "--fail-on error", `"$fn" audit -f`} {
		if !strings.Contains(string(script), want) {
			t.Errorf("gpupolicy-pr.sh lacks %q", want)
		}
	}
}
