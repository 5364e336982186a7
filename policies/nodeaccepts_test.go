package policies

import (
	"bytes"
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/fn/testing/manifestcheck"
	agentcli "github.com/gpupolicy/gpupolicy/plugin/agent/cli"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// TestNodeAcceptsRenderedToolkitInstall runs the node agent's own command line with the exact
// arguments the rendered gpu-container-toolkit DaemonSet gives it and the rendered drop-in, on a
// fake host, for every preset. The agent refuses on its own what the function refuses (runtime
// handlers, containerd minors, paths, flag values), so a rule tightened on one side only would
// render a stack whose toolkit stage never opens; this keeps the two sides in step. Only what a
// test host cannot have is replaced: the host root, the drop-in's mount path, no restart, no
// containerd binary, a /proc with an uptime, no watch and no CDI generation (no nvidia-ctk here).
// No containerd serves the host's CRI socket, so the install ends one step short of verified:
// the drop-in is installed and the only reason left is the unreachable socket (the toolkit
// package's tests verify through real containerd daemons).
func TestNodeAcceptsRenderedToolkitInstall(t *testing.T) {
	for _, p := range presets(t) {
		t.Run(p.name, func(t *testing.T) {
			pol, _ := renderPreset(t, p)
			objs, errs := manifestcheck.DecodeTree(filepath.Join("testdata", p.name))
			for _, err := range errs {
				t.Fatal(err)
			}
			var dropIn string
			var args []string
			for _, o := range objs {
				switch obj := o.Typed.(type) {
				case *corev1.ConfigMap:
					if obj.Name == config.DropInConfigMap {
						dropIn = obj.Data[config.DropInFile]
					}
				case *appsv1.DaemonSet:
					spec := obj.Spec.Template.Spec
					for _, c := range append(spec.InitContainers, spec.Containers...) {
						cmd := append(slices.Clone(c.Command), c.Args...)
						if len(cmd) > 2 && cmd[0] == "gpu-node-agent" && cmd[1] == "toolkit" && cmd[2] == "install" {
							args = cmd[1:]
						}
					}
				}
			}
			if dropIn == "" || args == nil {
				t.Fatalf("no drop-in ConfigMap or no toolkit install container in the rendered tree")
			}
			host := t.TempDir()
			dropInPath := filepath.Join(t.TempDir(), config.DropInFile)
			proc := filepath.Join(t.TempDir(), "proc")
			writeFile(t, dropInPath, dropIn)
			writeFile(t, filepath.Join(proc, "uptime"), "1000.00 1000.00\n")
			version := pol.Spec.ContainerRuntime.Version
			writeFile(t, filepath.Join(host, pol.Spec.ContainerRuntime.ConfigPath), nodeConfig(version))
			args = withFlags(t, args, map[string]string{
				"--host-root": host, "--drop-in": dropInPath, "--restart-mode": "none",
				"--containerd-bin": "none", "--proc": proc,
			}, "--watch", "--cdi-spec", "--nvidia-ctk", "--cdi-driver-root")
			var stdout, stderr bytes.Buffer
			code := agentcli.Main(context.Background(), args, &stdout, &stderr)
			if code != 1 || !strings.Contains(stderr.String(), "containerd drop-in installed") ||
				!strings.Contains(stderr.String(), `"error":"not verified: cannot reach containerd's CRI at /run/containerd/containerd.sock: no such socket`) {
				t.Fatalf("gpu-node-agent %s: exit %d, want 1 with only the CRI socket missing\n%s", strings.Join(args, " "), code, stderr.String())
			}
		})
	}
}

// nodeConfig is a node's own containerd config in the version its containerd minor reads, with
// a sandbox image the merge must keep.
func nodeConfig(minor string) string {
	if strings.HasPrefix(minor, "1.") {
		return "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"registry.example/pause:3.10\"\n"
	}
	return "version = 3\n[plugins.\"io.containerd.cri.v1.images\".pinned_images]\n  sandbox = \"registry.example/pause:3.10\"\n"
}

// withFlags sets each flag of set in args (replacing its value, or appending it) and removes the
// flags of drop with their values.
func withFlags(t *testing.T, args []string, set map[string]string, drop ...string) []string {
	t.Helper()
	out := slices.Clone(args)
	for _, f := range drop {
		if i := slices.Index(out, f); i >= 0 && i+1 < len(out) {
			out = slices.Delete(out, i, i+2)
		}
	}
	for _, f := range slices.Sorted(maps.Keys(set)) {
		if i := slices.Index(out, f); i >= 0 && i+1 < len(out) {
			out[i+1] = set[f]
		} else {
			out = append(out, f, set[f])
		}
	}
	return out
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
