package pipeline_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	yaml "go.yaml.in/yaml/v3"

	"github.com/gpupolicy/gpupolicy/fn/cli"
	"github.com/gpupolicy/gpupolicy/fn/krm"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// TestInvalidCorpusThroughRenderCLI: `gpupolicy-fn render` exits 1, prints the result with its
// field path on stderr, and writes nothing.
func TestInvalidCorpusThroughRenderCLI(t *testing.T) {
	for _, c := range loadInvalidCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			dir := t.TempDir()
			policy := filepath.Join(dir, "policy.yaml")
			if err := os.WriteFile(policy, c.Policy, 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "out")
			var stdout, stderr bytes.Buffer
			code := cli.Render(context.Background(), []string{"-f", policy, "-o", out}, &stdout, &stderr)
			if code != 1 {
				t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr.String())
			}
			line := "error: " + c.Field
			if c.Field == "" {
				line = "error: "
			}
			if !strings.Contains(stderr.String(), line) || !strings.Contains(stderr.String(), c.Message) {
				t.Errorf("stderr lacks %q ... %q:\n%s", line, c.Message, stderr.String())
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("render wrote %s despite errors", out)
			}
		})
	}
}

// TestInvalidCorpusThroughKRMFunction runs every case that is one YAML mapping (a KRM
// function can only receive those) as a kustomize generator's functionConfig: exit 1, no
// items, and the expected result with its field path, resourceRef and file.
func TestInvalidCorpusThroughKRMFunction(t *testing.T) {
	for _, c := range loadInvalidCases(t) {
		var doc yaml.Node
		if yaml.Unmarshal(c.Policy, &doc) != nil || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode || bytes.Contains(c.Policy, []byte("\n---\n")) {
			continue // broken YAML, empty or not a mapping: the orchestrator rejects it before the function runs
		}
		if bytes.HasPrefix(c.Policy, []byte{0xff, 0xfe}) || bytes.HasPrefix(c.Policy, []byte{0xfe, 0xff}) {
			continue // UTF-16 with a byte order mark: the orchestrator decodes it into its UTF-8 ResourceList
		}
		t.Run(c.Name, func(t *testing.T) {
			in := "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: passthrough}\nfunctionConfig:\n" + indent(string(c.Policy))
			var stdout, stderr bytes.Buffer
			code := krm.Run(strings.NewReader(in), &stdout, &stderr, validate.Options{})
			if code != 1 {
				t.Fatalf("exit %d, want 1; stderr: %s\nstdout: %s", code, stderr.String(), stdout.String())
			}
			rl, err := fn.ParseResourceList(stdout.Bytes())
			if err != nil {
				t.Fatalf("output is not a ResourceList: %v\n%s", err, stdout.String())
			}
			if len(rl.Items) != 0 {
				t.Errorf("%d items in the output of a rejected policy; want none", len(rl.Items))
			}
			field, msg := c.Field, c.Message
			if c.KRM != nil {
				field, msg = c.KRM.Field, c.KRM.Message
			}
			for _, r := range rl.Results {
				path := ""
				if r.Field != nil {
					path = r.Field.Path
				}
				if r.Severity == fn.Error && path == field && strings.Contains(r.Message, msg) {
					if r.ResourceRef == nil {
						t.Errorf("result without resourceRef: %v", r)
					}
					return
				}
			}
			t.Errorf("no error result at %q containing %q in:\n%s", field, msg, rl.Results.Error())
		})
	}
}

func indent(s string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "  " + l
	}
	return strings.Join(lines, "\n") + "\n"
}
