package render_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	srvconfig "github.com/containerd/containerd/v2/cmd/containerd/server/config"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/render"
	"github.com/gpupolicy/gpupolicy/plugin/config"

	"github.com/gpupolicy/gpupolicy/internal/peer"
)

func dropIn(t *testing.T, objs render.Objects) string {
	for _, o := range objs {
		if cm, ok := o.Obj.(*corev1.ConfigMap); ok && cm.Name == config.DropInConfigMap {
			return cm.Data[config.DropInFile]
		}
	}
	t.Fatal("no drop-in ConfigMap")
	return ""
}

// writeConfig puts the drop-in in conf.d next to a main config of the given version that
// imports it, the layout containerd reads on a node.
func writeConfig(t *testing.T, version int, text string) string {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "conf.d", config.DropInFile), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	main := filepath.Join(dir, "config.toml")
	body := "version = " + map[int]string{2: "2", 3: "3"}[version] + "\nimports = [\"" + filepath.Join(dir, "conf.d", "*.toml") + "\"]\n"
	if err := os.WriteFile(main, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return main
}

// TestDropInLoadsInContainerd2 loads every config-version-3 drop-in with containerd 2's own
// config loader (imports and merge included) and finds the handler with its binary.
func TestDropInLoadsInContainerd2(t *testing.T) {
	for _, name := range cases(t) {
		p, objs := load(t, name)
		if v, _ := render.ConfigVersion(p.Spec.ContainerRuntime.Version); v != 3 {
			continue
		}
		cfg := &srvconfig.Config{Version: 3}
		if err := srvconfig.LoadConfig(context.Background(), writeConfig(t, 3, dropIn(t, objs)), cfg); err != nil {
			t.Fatalf("%s: containerd 2 cannot load the drop-in: %v", name, err)
		}
		cri, _ := cfg.Plugins["io.containerd.cri.v1.runtime"].(map[string]any)
		ctrd, _ := cri["containerd"].(map[string]any)
		runtimes, _ := ctrd["runtimes"].(map[string]any)
		rt, _ := runtimes[p.Spec.Toolkit.RuntimeClassName].(map[string]any)
		opts, _ := rt["options"].(map[string]any)
		if opts["BinaryName"] == nil || rt["runtime_type"] != "io.containerd.runc.v2" {
			t.Fatalf("%s: handler %s not loaded: %v", name, p.Spec.Toolkit.RuntimeClassName, cfg.Plugins)
		}
		if v1alpha1.Bool(p.Spec.Toolkit.SetAsDefault) && ctrd["default_runtime_name"] != p.Spec.Toolkit.RuntimeClassName {
			t.Errorf("%s: default runtime %v", name, ctrd["default_runtime_name"])
		}
	}
}

// TestDropInLoadsInContainerd1 runs the real containerd 1.x (Debian's package) on every
// config-version-2 drop-in: `containerd config dump` must show the handler and its binary.
func TestDropInLoadsInContainerd1(t *testing.T) {
	bin, err := exec.LookPath("containerd")
	if err != nil {
		peer.Missing(t, "containerd 1.x is not installed (Debian package containerd)")
	}
	if out, _ := exec.Command(bin, "--version").Output(); !strings.Contains(string(out), " 1.") {
		t.Skipf("%s is not containerd 1.x: %s", bin, out)
	}
	tested := 0
	for _, name := range cases(t) {
		p, objs := load(t, name)
		if v, _ := render.ConfigVersion(p.Spec.ContainerRuntime.Version); v != 2 {
			continue
		}
		out, err := exec.Command(bin, "--config", writeConfig(t, 2, dropIn(t, objs)), "config", "dump").CombinedOutput()
		if err != nil {
			t.Fatalf("%s: containerd config dump: %v\n%s", name, err, out)
		}
		handler := p.Spec.Toolkit.RuntimeClassName
		for _, want := range []string{
			`[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.` + handler + `.options]`,
			`BinaryName = "` + map[bool]string{true: "/usr/bin/nvidia-container-runtime", false: "/usr/local/nvidia/toolkit/nvidia-container-runtime"}[p.Spec.Toolkit.Source == "preinstalled"] + `"`,
		} {
			if !strings.Contains(string(out), want) {
				t.Errorf("%s: config dump lacks %s", name, want)
			}
		}
		tested++
	}
	if tested == 0 {
		t.Fatal("no config-version-2 case")
	}
}
