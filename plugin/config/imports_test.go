package config

import (
	"os/exec"
	"strings"
	"testing"
)

// The node programs depend on the contract (this package) and shared leaves (version,
// internal), never on the function: a change to fn/ must not change what runs on the nodes.
func TestPluginDoesNotImportFn(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "github.com/gpupolicy/gpupolicy/plugin/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const module, fn = "github.com/gpupolicy/gpupolicy/", "github.com/gpupolicy/gpupolicy/fn/"
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 || !strings.HasPrefix(fields[0], module+"plugin/") {
			continue
		}
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, fn) {
				t.Errorf("%s imports %s: move what it needs into plugin/config or a neutral package", fields[0], imp)
			}
		}
	}
}
