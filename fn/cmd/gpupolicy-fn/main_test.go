package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/version"
)

// TestInstallsAsGpupolicyFn: `go install <module>/fn/cmd/gpupolicy-fn@<version>` names the
// binary gpupolicy-fn (go install names it after the package's directory), and the binary is
// the same command as ./fn.
func TestInstallsAsGpupolicyFn(t *testing.T) {
	const pkg = "github.com/gpupolicy/gpupolicy/fn/cmd/gpupolicy-fn"
	out, err := exec.Command("go", "list", "-f", "{{.Target}}", pkg).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	if name := filepath.Base(strings.TrimSpace(string(out))); name != "gpupolicy-fn" {
		t.Fatalf("go install would name the binary %q", name)
	}
	bin := filepath.Join(t.TempDir(), "gpupolicy-fn")
	if b, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	got, err := exec.Command(bin, "version").Output()
	if err != nil || strings.TrimSpace(string(got)) != version.Version {
		t.Fatalf("gpupolicy-fn version: %q, %v", got, err)
	}
}
