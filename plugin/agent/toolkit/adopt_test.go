package toolkit

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpupolicy/gpupolicy/internal/peer"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// A node taken over from the GPU Operator: its toolkit (NVIDIA's own `nvidia-ctk runtime
// configure`, as the operator's installer runs it) left containerd running an nvidia handler
// equal to the one the policy renders. The first `toolkit install` there writes its drop-in,
// verifies the handler through the CRI and does not restart containerd: the same process keeps
// serving, so the takeover restarts nothing. A handler that differs (another BinaryName) is
// restarted into effect as on any node.
func TestAdoptsEquivalentHandlerContainerd16(t *testing.T) {
	testAdoptsEquivalentHandler(t, "/usr/bin/containerd", "1.6")
}

func TestAdoptsEquivalentHandlerContainerd21(t *testing.T) {
	testAdoptsEquivalentHandler(t, peer.Containerd2(t), "2.1")
}

func testAdoptsEquivalentHandler(t *testing.T, bin, version string) {
	ctk := peer.NVIDIACtk(t)
	if !runInNamespaces(t, "--pid", "--fork", "--mount-proc") {
		return
	}
	ctx := context.Background()
	v, _ := ParseVersion(version)
	cv := v.ConfigVersion()
	const other = "/opt/nvidia/runtime-v2"
	installRuntime(t, renderedRuntime)
	installRuntime(t, other)
	// CDI is for containerd 1.7 and later: on 1.6 neither side enables it.
	cdi := cv >= 3
	// node writes kubeadm's containerd config plus extra, and clears the toolkit's state.
	node := func(extra string) {
		t.Helper()
		for _, f := range []string{DefaultConfigPath, config.ToolkitStatusFile, DefaultDropInDir} {
			if err := os.RemoveAll(f); err != nil {
				t.Fatal(err)
			}
		}
		main := strings.ReplaceAll(fmt.Sprintf("version = %d\n%s%s", cv, handlerCases[0].main, extra), "plugins.CRI", `plugins."`+config.CRIRuntimePlugin(cv)+`"`)
		if err := os.WriteFile(DefaultConfigPath, []byte(main), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// operatorNode is that config after the operator's toolkit configured it.
	operatorNode := func() {
		t.Helper()
		node("")
		args := []string{"runtime", "configure", "--runtime=containerd", "--config=" + DefaultConfigPath,
			"--drop-in-config=" + filepath.Join(DefaultDropInDir, "99-nvidia.toml"), "--config-source=command",
			"--executable-path=" + bin, "--nvidia-runtime-path=" + renderedRuntime}
		if cdi {
			args = append(args, "--cdi.enabled")
		}
		if out, err := exec.Command(ctk, args...).CombinedOutput(); err != nil {
			t.Fatalf("nvidia-ctk runtime configure: %v\n%s", err, out)
		}
	}
	rendered := renderedDropIn(cv)
	if !cdi {
		rendered = strings.Replace(rendered, "  enable_cdi = true\n  cdi_spec_dirs = [\"/etc/cdi\", \"/var/run/cdi\"]\n", "", 1)
	}
	dropIn := filepath.Join(t.TempDir(), "drop-in.toml")
	if err := os.WriteFile(dropIn, []byte(rendered), 0o644); err != nil {
		t.Fatal(err)
	}
	in := &Installer{HostRoot: "/", DropInSource: dropIn, ContainerdVersion: version, ContainerdBinary: bin,
		RestartMode: RestartSignal, ProcDir: "/proc", RestartTimeout: 20 * time.Second}

	operatorNode()
	d := startDaemon(t, bin)
	before := d.pid()
	res, err := in.Install(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Changed || res.Restarted || !res.Verified || d.pid() != before || !contains(res.Status.VerifiedBy, "containerd was not restarted") {
		t.Fatalf("equivalent handler (pid %d, was %d): %+v", d.pid(), before, res)
	}
	if ready, reason := GateCheck("/", sha(must(os.ReadFile(dropIn)))); !ready {
		t.Fatalf("gate closed after the adopting install: %s", reason)
	}
	// containerd's next start (the operator's toolkit cleaning up, a node reboot) loads the
	// drop-in: the handler stays.
	d.restart()
	if res = must(in.Install(ctx)); res.Changed || res.Restarted || !res.Verified {
		t.Fatalf("after containerd's next start: %+v", res)
	}
	runningHandler(t, renderedRuntime)

	// A handler the node has already, with another binary (configured by hand): not in
	// effect, so the install restarts containerd, and the new process runs the policy's.
	node(`
[plugins.CRI.containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
[plugins.CRI.containerd.runtimes.nvidia.options]
  BinaryName = "` + other + `"
`)
	d.restart()
	before = d.pid()
	res, err = in.Install(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Changed || !res.Restarted || !res.Verified || d.pid() == before || contains(res.Status.VerifiedBy, "not restarted") {
		t.Fatalf("different handler (pid %d, was %d): %+v", d.pid(), before, res)
	}
	runningHandler(t, renderedRuntime)
}

// runningHandler checks, through the CRI, that containerd runs the nvidia handler with
// binaryName and kept the node's runc (the systemd cgroup driver).
func runningHandler(t *testing.T, binaryName string) {
	t.Helper()
	view := must(queryCRI(context.Background(), DefaultContainerdSocket, DefaultContainerdSocket))
	if got := digJSON(view.Runtimes["nvidia"], "options", "BinaryName"); got != binaryName {
		t.Fatalf("CRI: nvidia BinaryName %v, want %s", got, binaryName)
	}
	if digJSON(view.Runtimes["runc"], "options", "SystemdCgroup") != true {
		t.Fatalf("CRI: the node's runc lost its systemd cgroup driver: %v", view.Runtimes["runc"])
	}
}
