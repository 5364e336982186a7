package config

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the README's generated stage table")

// The README's stage table is generated from Gates (go test ./plugin/config -update rewrites
// it): the docs cannot describe a stage the code does not have, or miss one.
func TestREADMEStageTable(t *testing.T) {
	const path, begin, end = "../../README.md", "<!-- stage-table:begin (generated from plugin/config.Gates: go test ./plugin/config -update) -->\n", "<!-- stage-table:end -->\n"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i, j := strings.Index(text, begin), strings.Index(text, end)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the stage-table markers %q ... %q", path, strings.TrimSpace(begin), strings.TrimSpace(end))
	}
	want := text[:i+len(begin)] + StageTableMarkdown() + text[j:]
	if want == text {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's stage table is stale: go test ./plugin/config -update, and review the diff", path)
}
