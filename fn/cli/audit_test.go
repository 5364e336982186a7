package cli

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/internal/fntest"
)

// TestAuditUsage: the flags reach audit.Run (its output is fn/audit's golden file) and usage
// errors exit 2 before anything is read.
func TestAuditUsage(t *testing.T) {
	want, err := os.ReadFile("../audit/testdata/fixture.json")
	if err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := fntest.Run(Audit, "-f", "../audit/testdata/fixture.yaml", "-o", "json"); code != 0 || out != string(want) {
		t.Errorf("-o json: exit %d, stderr %s; output differs from ../audit/testdata/fixture.json", code, stderr)
	}
	if code, _, _ := fntest.Run(Audit); code != 2 {
		t.Errorf("no -f: exit %d, want 2", code)
	}
	if code, _, _ := fntest.Run(Audit, "-f", "x", "-o", "html"); code != 2 {
		t.Errorf("bad -o: exit %d, want 2", code)
	}
	if code, _, stderr := fntest.Run(Audit, "--help"); code != 0 || !strings.Contains(stderr, "Usage: gpupolicy-fn audit -f POLICY|DIR|FILE") {
		t.Errorf("--help: exit %d: %s", code, stderr)
	}
}

// TestEmptyInputRefused: audit and diff refuse a file with no objects (empty, or only comments
// and document separators) instead of reporting "0 workloads" or no change.
func TestEmptyInputRefused(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"empty.yaml": "", "comments.yaml": "# nothing yet\n---\n---\n"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		want := p + " holds no Kubernetes objects (it is empty or only comments): pass a GPUPolicy file, a directory written by `gpupolicy-fn render -o` or a file of rendered objects"
		if code, out, errs := fntest.Run(Audit, "-f", p); code != 1 || out != "" || !strings.Contains(errs, "audit: "+want) {
			t.Errorf("audit -f %s: exit %d, stdout %q: %s", name, code, out, errs)
		}
		if code, out, errs := fntest.Run(Diff, "../audit/testdata/fixture.yaml", p); code != 1 || out != "" || !strings.Contains(errs, want) {
			t.Errorf("diff fixture %s: exit %d, stdout %q: %s", name, code, out, errs)
		}
	}
}

// TestDashIsNotStdin: "-" as a file is refused by render, audit and diff with the way to read
// stdin (/dev/stdin), not "open -: no such file".
func TestDashIsNotStdin(t *testing.T) {
	const want = `"-" is not read as stdin: save the input to a file and pass its name, or pass /dev/stdin to read it from a pipe`
	out := filepath.Join(t.TempDir(), "out")
	for _, c := range []struct {
		cmd    func(context.Context, []string, io.Writer, io.Writer) int
		args   []string
		prefix string
	}{
		{Render, []string{"-f", "-", "-o", out}, "render: -f -: "},
		{Audit, []string{"-f", "-"}, "audit: "},
		{Diff, []string{"-", "../audit/testdata/fixture.yaml"}, "diff: "},
	} {
		if code, _, errs := fntest.Run(c.cmd, c.args...); code != 1 || !strings.Contains(errs, c.prefix+want) {
			t.Errorf("%v: exit %d: %s", c.args, code, errs)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Error("render wrote its output")
	}
}
