package examples

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/internal/peer"
)

const prScript = "github-actions/gpupolicy-pr.sh"

// Policies of the three outcomes, as base → head.
var prCases = map[string][2]string{
	"clean":   {"../fn/diff/testdata/base.yaml", "../fn/diff/testdata/base.yaml"},
	"warning": {"../fn/diff/testdata/base.yaml", "../fn/diff/testdata/head-upgrade-all.yaml"},
	"error":   {"../fn/diff/testdata/base.yaml", "../fn/testdata/invalid/cuda13-driver-too-old/policy.yaml"},
}

// permutations lists every order of xs.
func permutations(xs []string) [][]string {
	if len(xs) <= 1 {
		return [][]string{append([]string{}, xs...)}
	}
	var out [][]string
	for i := range xs {
		rest := append(append([]string{}, xs[:i]...), xs[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]string{xs[i]}, p...))
		}
	}
	return out
}

// prRepo lays out a GitOps repository whose clusters are the given outcomes in that order
// (clusters/0-error, clusters/1-clean, ...: the script's glob visits them so) and its base
// checkout.
func prRepo(t *testing.T, order []string) (repo, base string) {
	t.Helper()
	repo, base = t.TempDir(), t.TempDir()
	for i, kind := range order {
		name := fmt.Sprintf("clusters/%d-%s/gpupolicy.yaml", i, kind)
		for j, root := range []string{base, repo} {
			data, err := os.ReadFile(prCases[kind][j])
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(root, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return repo, base
}

func runPR(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	script, err := filepath.Abs(prScript)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", append([]string{script}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GPUPOLICY_FN="+gpupolicyFn(t))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestPRScriptWorstWins runs the workflow's per-policy logic with error, warning and clean
// policies in every order and every combination: errors always win over warnings, warnings
// over clean, whichever policy comes last (the bug this replaces let a later warning-only
// policy overwrite an error, so the accept-warnings label let errors through).
func TestPRScriptWorstWins(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not installed")
	}
	for _, set := range [][]string{{"error", "warning", "clean"}, {"error", "warning"}, {"error", "clean"}, {"warning", "clean"}, {"clean"}, {"error"}, {"warning"}} {
		want := "status=0"
		switch {
		case strings.Contains(strings.Join(set, " "), "error"):
			want = "status=2"
		case strings.Contains(strings.Join(set, " "), "warning"):
			want = "status=1"
		}
		for _, order := range permutations(set) {
			repo, base := prRepo(t, order)
			report := filepath.Join(t.TempDir(), "diff.md")
			out, err := runPR(t, repo, "diff", base, report)
			if err != nil || strings.TrimSpace(out) != want {
				t.Errorf("%v: %v, output %q, want %q", order, err, out, want)
				continue
			}
			md, _ := os.ReadFile(report)
			for i, kind := range order {
				name := fmt.Sprintf("clusters/%d-%s/gpupolicy.yaml", i, kind)
				if !strings.Contains(string(md), name) {
					t.Errorf("%v: the report lacks %s", order, name)
				}
			}
			if strings.Contains(want, "2") && !strings.Contains(string(md), "**error**: gpupolicy-fn diff failed:") || strings.Contains(want, "2") && !strings.Contains(string(md), "spec.cuda.version") {
				t.Errorf("%v: the report must say why the invalid policy failed:\n%s", order, md)
			}
		}
	}
}

// TestPRScriptNewPolicy: a policy that the base lacks gets its audit; an invalid new one is an
// error.
func TestPRScriptNewPolicy(t *testing.T) {
	repo, base := prRepo(t, []string{"clean"})
	for name, src := range map[string]string{"new": "../fn/diff/testdata/base.yaml", "new-bad": prCases["error"][1]} {
		data, _ := os.ReadFile(src)
		p := filepath.Join(repo, "clusters", name, "gpupolicy.yaml")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	report := filepath.Join(t.TempDir(), "diff.md")
	out, err := runPR(t, repo, "diff", base, report)
	md, _ := os.ReadFile(report)
	if err != nil || strings.TrimSpace(out) != "status=2" || !strings.Contains(string(md), "New policy: its audit follows.") || !strings.Contains(string(md), "**error**: gpupolicy-fn audit failed:") {
		t.Errorf("%v %q:\n%s", err, out, md)
	}
}

// TestPRScriptVerdict: the label accepts warnings, never errors, and a missing status (the
// diff step broke) fails.
func TestPRScriptVerdict(t *testing.T) {
	for _, tc := range []struct {
		status, accept string
		fail           bool
		annotation     string
	}{
		{"0", "false", false, "no findings"},
		{"1", "true", false, "::warning::"},
		{"1", "false", true, "::error::gpupolicy diff found warnings"},
		{"2", "true", true, "::error::gpupolicy diff found errors"},
		{"2", "false", true, "::error::gpupolicy diff found errors"},
		{"", "true", true, "did not finish"},
	} {
		out, err := runPR(t, t.TempDir(), "verdict", tc.status, tc.accept)
		if (err != nil) != tc.fail || !strings.Contains(out, tc.annotation) {
			t.Errorf("verdict %q %q: err %v, output %q", tc.status, tc.accept, err, out)
		}
	}
	if _, err := runPR(t, t.TempDir(), "bogus"); err == nil {
		t.Error("an unknown subcommand must fail")
	}
}

// workflowRuns parses a GitHub Actions workflow and returns its raw text and every step's run
// script and with: values, failing on a step that is not valid bash.
func workflowRuns(t *testing.T, path string) (text string, runs string, with map[string]string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		Jobs map[string]struct {
			Steps []struct {
				Name string            `json:"name"`
				Run  string            `json:"run"`
				With map[string]string `json:"with"`
			} `json:"steps"`
		} `json:"jobs"`
	}
	if err := yaml.Unmarshal(data, &wf); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(wf.Jobs) != 1 {
		t.Fatalf("%s: want one job, got %d", path, len(wf.Jobs))
	}
	var all strings.Builder
	with = map[string]string{}
	for _, job := range wf.Jobs {
		for _, s := range job.Steps {
			maps.Copy(with, s.With)
			if s.Run == "" {
				continue
			}
			all.WriteString(s.Run)
			cmd := exec.Command("bash", "-n")
			cmd.Stdin = strings.NewReader(s.Run)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s: step %q is not valid bash: %v\n%s", path, s.Name, err, out)
			}
		}
	}
	return string(data), all.String(), with
}

// TestPullRequestWorkflow keeps github-actions/workflow.yaml honest: it parses as a workflow
// on pull_request, every run script is valid bash, and it and its gpupolicy-pr.sh use the
// commands and flags fn/diff and the render CLI define.
func TestPullRequestWorkflow(t *testing.T) {
	text, runs, _ := workflowRuns(t, "github-actions/workflow.yaml")
	// YAML 1.1 reads the key "on" as true, so it is checked as text.
	if !strings.Contains(text, "\non:\n  pull_request:") {
		t.Error("want a workflow on pull_request")
	}
	script, err := os.ReadFile(prScript)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"gpupolicy-fn render -f", ".github/gpupolicy-pr.sh diff ", ".github/gpupolicy-pr.sh verdict ", "gh pr comment"} {
		if !strings.Contains(runs, want) {
			t.Errorf("workflow lacks %q", want)
		}
	}
	for _, want := range []string{`"$fn" diff --fail-on none`, "--fail-on warning", "--fail-on error", `"$fn" audit -f`} {
		if !strings.Contains(string(script), want) {
			t.Errorf("gpupolicy-pr.sh lacks %q", want)
		}
	}
}

// TestReleaseWorkflow keeps examples/github-actions/release.yaml honest: a tag push builds the
// image for amd64 and arm64, every run script is valid bash, and the pinning goes through
// pin-image.sh (TestPinImage runs it).
func TestReleaseWorkflow(t *testing.T) {
	text, runs, with := workflowRuns(t, "github-actions/release.yaml")
	if !strings.Contains(text, "\non:\n  push:\n    tags: [\"v*\"]\n") {
		t.Error("want a workflow on push of tags v*")
	}
	if with["platforms"] != "linux/amd64,linux/arm64" {
		t.Errorf("image platforms %q, want linux/amd64,linux/arm64", with["platforms"])
	}
	for _, want := range []string{".github/pin-image.sh \"$IMAGE@$DIGEST\"", "./fn/cmd/gpupolicy-fn", "GOARCH=\"$arch\"", "CHANGELOG.md"} {
		if !strings.Contains(runs, want) {
			t.Errorf("release.yaml lacks %q", want)
		}
	}
}

// YQVersion is the yq the release example's pin-image.sh is verified with (the Makefile pins
// the same; GitHub's runners have a yq v4 too).
const YQVersion = "v4.44.3"

// yqV4 returns a yq v4 (github.com/mikefarah/yq): $YQ, else where `make tools` installs it.
// In CI (CI set) a missing one fails the test; elsewhere it skips. Debian's yq package is a
// different program (a jq wrapper) and does not count.
func yqV4(t *testing.T) string {
	t.Helper()
	path := peer.Tool(t, "YQ", "yq", YQVersion, "yq")
	out, err := exec.Command(path, "--version").Output()
	if err != nil || !strings.Contains(string(out), "mikefarah") {
		peer.Missing(t, "yq "+YQVersion+" at "+path+" is not github.com/mikefarah/yq: run `make tools` (or set YQ)")
	}
	return path
}

// TestPinImage runs the release's pinning step: the policy's spec.images.gpupolicy becomes
// the image by digest, the tree renders, and every container of the gpupolicy image runs that
// reference; a reference without a digest, or with one that is not sha256:<64 hex>, fails.
func TestPinImage(t *testing.T) {
	yq := yqV4(t)
	script, _ := filepath.Abs("github-actions/pin-image.sh")
	run := func(ref, out string) (string, error) {
		cmd := exec.Command("bash", script, ref, "kustomize/gpupolicy.yaml", out)
		cmd.Env = append(os.Environ(), "GPUPOLICY_FN="+gpupolicyFn(t), "PATH="+filepath.Dir(yq)+string(os.PathListSeparator)+os.Getenv("PATH"))
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	ref := "ghcr.io/gpupolicy/gpupolicy@sha256:" + strings.Repeat("0123456789abcdef", 4)
	out := filepath.Join(t.TempDir(), "pinned")
	msg, err := run(ref, out)
	if err != nil || !strings.Contains(msg, "pinned: ") || !strings.Contains(msg, " containers run "+ref) {
		t.Fatalf("%v: %s", err, msg)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "gpupolicy.yaml")); !strings.Contains(string(b), ref) {
		t.Errorf("the pinned policy lacks %s:\n%s", ref, b)
	}
	if msg, err := run("ghcr.io/gpupolicy/gpupolicy:v0.1.0", filepath.Join(t.TempDir(), "x")); err == nil || !strings.Contains(msg, "is not IMAGE@sha256:DIGEST") {
		t.Errorf("a tag instead of a digest: %v %s", err, msg)
	}
	if msg, err := run("ghcr.io/gpupolicy/gpupolicy@sha256:abc", filepath.Join(t.TempDir(), "y")); err == nil || !strings.Contains(msg, "spec.images.gpupolicy") {
		t.Errorf("a short digest must fail render with the field path: %v %s", err, msg)
	}
}

// TestFleetWorkflow keeps github-actions/fleet.yaml honest: a workflow on pull_request whose
// run scripts are valid bash, building every cluster with kustomize, posting `gpupolicy-fn fleet
// diff` between the base and head revisions with the flags the command defines.
func TestFleetWorkflow(t *testing.T) {
	text, runs, _ := workflowRuns(t, "github-actions/fleet.yaml")
	if !strings.Contains(text, "\non:\n  pull_request:") {
		t.Error("want a workflow on pull_request")
	}
	for _, want := range []string{"kustomize build --enable-alpha-plugins --enable-exec", `gpupolicy-fn fleet diff --fail-on warning "$BASE_SHA:fleet/rendered" fleet/rendered`,
		"--fail-on error", "gh pr comment", "fn/cmd/gpupolicy-fn@"} {
		if !strings.Contains(runs, want) {
			t.Errorf("fleet workflow lacks %q", want)
		}
	}
	// The flags it passes are the command's.
	out, _ := exec.Command(gpupolicyFn(t), "fleet", "diff", "--help").CombinedOutput()
	help := string(out)
	for _, flag := range []string{"-fail-on", "-o"} {
		if !strings.Contains(help, "  "+flag+" ") {
			t.Errorf("fleet diff --help lacks %s:\n%s", flag, help)
		}
	}
}
