package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/nodefacts/hostfacts"
)

// --cdi-spec reaches the installer: a node without nvidia-ctk keeps the gate closed (exit 1,
// a status file that is not verified) and the error names the spec, the missing program and
// the fix.
func TestToolkitInstallCDISpecFlag(t *testing.T) {
	root, dropIn, proc := toolkitHost(t)
	base := []string{"toolkit", "install", "--host-root", root, "--drop-in", dropIn, "--containerd-version", "2.1",
		"--restart-mode", "none", "--containerd-bin", "none", "--proc", proc, "--cdi-spec", config.CDISpecFile}
	code, out, errs := run(base...)
	if code != 1 || !strings.Contains(errs, "CDI spec "+config.CDISpecFile+": nvidia-ctk is not installed on the node") ||
		!strings.Contains(out, `"Verified":false`) {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
	if st, err := hostfacts.ReadToolkitStatus(root); err != nil || st.Verified || !strings.Contains(st.Reason, "nvidia-ctk is not installed") {
		t.Fatalf("status file without a CDI spec: %+v %v", st, err)
	}
	code, _, errs = run(append(base, "--nvidia-ctk", "/usr/local/nvidia/toolkit/nvidia-ctk")...)
	if code != 1 || !strings.Contains(errs, "--nvidia-ctk /usr/local/nvidia/toolkit/nvidia-ctk") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if _, err := os.Stat(filepath.Join(root, config.CDISpecFile)); !os.IsNotExist(err) {
		t.Fatalf("a CDI spec appeared: %v", err)
	}
}
