package toolkit

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/plugin/config"

	"github.com/gpupolicy/gpupolicy/internal/peer"
)

// handlerCase is a node's containerd configuration, written for config version 2 or 3 from
// one text whose CRI plugin table is named CRI.
type handlerCase struct {
	name    string
	main    string            // /etc/containerd/config.toml
	imports map[string]string // files in /etc/containerd/conf.d
	// differs names the keys of the effective nvidia runtime in which gpupolicy differs from
	// nvidia-ctk on purpose, with the reason; empty: equal.
	differs map[string]string
}

var handlerCases = []handlerCase{
	{name: "runc with the systemd cgroup driver (kubeadm's default)", main: `
[plugins.CRI]
  sandbox_image = "registry.k8s.io/pause:3.10"
[plugins.CRI.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins.CRI.containerd.runtimes.runc.options]
  SystemdCgroup = true
`},
	{name: "runc with more options", main: `
[plugins.CRI.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  privileged_without_host_devices = true
  pod_annotations = ["io.kubernetes.cri-o.Devices"]
  cni_conf_dir = "/etc/cni/net.d"
[plugins.CRI.containerd.runtimes.runc.options]
  SystemdCgroup = true
  NoNewKeyring = true
  Root = "/run/runc-node"
  ShimCgroup = "/system.slice/containerd.service"
`},
	{name: "runc with its own BinaryName", main: `
[plugins.CRI.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins.CRI.containerd.runtimes.runc.options]
  BinaryName = "/usr/local/sbin/runc"
  SystemdCgroup = true
`},
	{name: "crun as the default runtime", main: `
[plugins.CRI.containerd]
  default_runtime_name = "crun"
[plugins.CRI.containerd.runtimes.crun]
  runtime_type = "io.containerd.runc.v2"
[plugins.CRI.containerd.runtimes.crun.options]
  BinaryName = "/usr/bin/crun"
  SystemdCgroup = true
[plugins.CRI.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
`},
	{name: "a default runtime of another shim (Kata)", main: `
[plugins.CRI.containerd]
  default_runtime_name = "kata"
[plugins.CRI.containerd.runtimes.kata]
  runtime_type = "io.containerd.kata.v2"
  privileged_without_host_devices = true
[plugins.CRI.containerd.runtimes.kata.options]
  ConfigPath = "/opt/kata/share/defaults/kata-containers/configuration.toml"
[plugins.CRI.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins.CRI.containerd.runtimes.runc.options]
  SystemdCgroup = true
`, differs: map[string]string{
		"runtime_type":                    "nvidia-ctk copies Kata's runtime type, so its nvidia handler runs the Kata shim, which ignores BinaryName: GPU pods would get no NVIDIA hook; gpupolicy starts from runc, the runtime nvidia-container-runtime wraps",
		"privileged_without_host_devices": "Kata's, copied by nvidia-ctk; gpupolicy has runc's",
		"options":                         "Kata's ConfigPath (nvidia-ctk) against runc's SystemdCgroup (gpupolicy)",
		"sandboxer":                       "containerd 2.x: Kata's empty sandboxer (nvidia-ctk) against runc's podsandbox (gpupolicy)",
	}},
	{name: "an nvidia runtime the node already has", main: `
[plugins.CRI.containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
  privileged_without_host_devices = true
[plugins.CRI.containerd.runtimes.nvidia.options]
  BinaryName = "/usr/bin/nvidia-container-runtime"
  NoPivotRoot = true
[plugins.CRI.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins.CRI.containerd.runtimes.runc.options]
  SystemdCgroup = true
`},
	{name: "runc set in an imported drop-in", main: `
imports = ["/etc/containerd/conf.d/*.toml"]
[plugins.CRI]
  sandbox_image = "registry.k8s.io/pause:3.10"
`, imports: map[string]string{"10-node.toml": `
[plugins.CRI]
  sandbox_image = "registry.k8s.io/pause:3.10"
[plugins.CRI.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins.CRI.containerd.runtimes.runc.options]
  SystemdCgroup = true
  NoNewKeyring = true
`}},
	{name: "containerd's defaults (no runtime in the config)", main: `
[plugins.CRI]
  sandbox_image = "registry.k8s.io/pause:3.10"
`},
}

// renderedDropIn is the drop-in gpupolicy-fn renders for this config version (toolkit.cdi on,
// the default runtimeClassName and install directory).
func renderedDropIn(version int) string {
	cri := `plugins."` + config.CRIRuntimePlugin(version) + `"`
	return fmt.Sprintf(`version = %d

[%s]
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]

[%s.containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"

[%s.containerd.runtimes.nvidia.options]
  BinaryName = %q
`, version, cri, cri, cri, renderedRuntime)
}

// TestHandlerMatchesNVIDIACtk is the differential test of the runtime handler: for each node
// configuration, on containerd 1.6 (config version 2) and 2.1 (version 3), `nvidia-ctk runtime
// configure` (NVIDIA's own code) configures one copy of the node and `toolkit install` another;
// the real containerd loads each (`containerd config dump`), and the effective nvidia runtime
// and CRI plugin must be equal but for the differences each case lists with its reason.
func TestHandlerMatchesNVIDIACtk(t *testing.T) {
	ctk := peer.NVIDIACtk(t)
	daemons := []struct {
		version string
		bin     string
	}{{"1.6", "/usr/bin/containerd"}, {"2.1", peer.Containerd2(t)}}
	if !runInNamespace(t) {
		return
	}
	for _, d := range daemons {
		v, _ := ParseVersion(d.version)
		cv := v.ConfigVersion()
		cri := config.CRIRuntimePlugin(cv)
		for _, c := range handlerCases {
			t.Run(d.version+"/"+c.name, func(t *testing.T) {
				write := func() {
					t.Helper()
					for _, dir := range []string{"/etc/containerd", "/var/lib/gpupolicy"} {
						entries, _ := os.ReadDir(dir)
						for _, e := range entries {
							if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
								t.Fatal(err)
							}
						}
					}
					text := func(s string) []byte {
						return []byte(strings.ReplaceAll(fmt.Sprintf("version = %d\n%s", cv, s), "plugins.CRI", `plugins."`+cri+`"`))
					}
					if err := os.WriteFile(DefaultConfigPath, text(c.main), 0o644); err != nil {
						t.Fatal(err)
					}
					for name, body := range c.imports {
						if err := os.MkdirAll(DefaultDropInDir, 0o755); err != nil {
							t.Fatal(err)
						}
						if err := os.WriteFile(filepath.Join(DefaultDropInDir, name), text(body), 0o644); err != nil {
							t.Fatal(err)
						}
					}
				}
				dump := func(who string) table {
					t.Helper()
					out, err := Host{Root: "/"}.dump(context.Background(), d.bin, DefaultConfigPath)
					if err != nil {
						t.Fatalf("containerd %s cannot load the config %s wrote: %v", d.version, who, err)
					}
					tb, err := parseTOML("dump", out)
					if err != nil {
						t.Fatal(err)
					}
					return subTable(subTable(tb, "plugins"), cri)
				}

				write()
				cmd := exec.Command(ctk, "runtime", "configure", "--runtime=containerd", "--config="+DefaultConfigPath,
					"--drop-in-config="+filepath.Join(DefaultDropInDir, "99-nvidia.toml"), "--config-source=command",
					"--executable-path="+d.bin, "--nvidia-runtime-path="+renderedRuntime, "--cdi.enabled")
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("nvidia-ctk runtime configure: %v\n%s", err, out)
				}
				theirs := dump("nvidia-ctk")

				write()
				dropIn := filepath.Join(t.TempDir(), "drop-in.toml")
				if err := os.WriteFile(dropIn, []byte(renderedDropIn(cv)), 0o644); err != nil {
					t.Fatal(err)
				}
				in := &Installer{HostRoot: "/", DropInSource: dropIn, ContainerdVersion: d.version, ContainerdBinary: d.bin,
					RestartMode: RestartNone, ProcDir: emptyProc()}
				if _, err := in.Install(context.Background()); err != nil {
					t.Fatalf("toolkit install: %v", err)
				}
				ours := dump("toolkit install")

				theirHandler, _ := dig(theirs, "containerd", "runtimes", "nvidia").(table)
				ourHandler, _ := dig(ours, "containerd", "runtimes", "nvidia").(table)
				if theirHandler == nil || ourHandler == nil {
					t.Fatalf("effective nvidia runtime: nvidia-ctk %v, gpupolicy %v", theirHandler, ourHandler)
				}
				for _, k := range keysOf(theirHandler, ourHandler) {
					same := reflect.DeepEqual(theirHandler[k], ourHandler[k])
					why, listed := c.differs[k]
					switch {
					case !same && !listed:
						t.Errorf("runtimes.nvidia.%s: nvidia-ctk %v, gpupolicy %v", k, theirHandler[k], ourHandler[k])
					case same && listed:
						t.Errorf("runtimes.nvidia.%s is equal, but the case lists a difference (%s)", k, why)
					}
				}
				// The rest of the CRI plugin (what below 2.1 both copy into their drop-ins) too.
				delete(theirs["containerd"].(table)["runtimes"].(table), "nvidia")
				delete(ours["containerd"].(table)["runtimes"].(table), "nvidia")
				if !reflect.DeepEqual(theirs, ours) {
					for _, k := range keysOf(theirs, ours) {
						if !reflect.DeepEqual(theirs[k], ours[k]) {
							t.Errorf("CRI plugin %s: nvidia-ctk %v, gpupolicy %v", k, theirs[k], ours[k])
						}
					}
				}
				if t.Failed() {
					t.Logf("nvidia-ctk's nvidia runtime: %v\ngpupolicy's: %v", theirHandler, ourHandler)
				}
			})
		}
	}
}

// keysOf lists the keys of a and b, sorted.
func keysOf(a, b table) []string {
	seen := map[string]bool{}
	var out []string
	for _, t := range []table{a, b} {
		for k := range t {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	slices.Sort(out)
	return out
}
