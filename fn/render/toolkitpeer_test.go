package render_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/render"
	"github.com/gpupolicy/gpupolicy/internal/peer"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// loadedToolkitConfig is the part of NVIDIA's loaded Config the policy decides.
type loadedToolkitConfig struct {
	NVIDIAContainerCLIConfig struct {
		Root, Path, Ldconfig string
	}
	NVIDIACTKConfig                  struct{ Path string }
	NVIDIAContainerRuntimeHookConfig struct{ Path string }
	NVIDIAContainerRuntimeConfig     struct {
		Mode, DebugFilePath, LogLevel string
		Runtimes                      []string
	}
}

// TestToolkitConfigLoadsInNVIDIAsLoader runs NVIDIA's own installer (nvidia-ctk-installer
// v1.20.2, the program of the toolkit image) with the environment every golden case's
// toolkit-copy init container gets, then loads the config.toml it wrote with NVIDIA's loader
// (api/config/v1) and checks the values the policy meant: the driver root (and its ldconfig) of
// the policy's driver source, the tools at the install directory the drop-in and the agent
// use, the runtime in its default auto mode with its log where NVIDIA puts it. It also checks
// that the drop-in's BinaryName is the installed runtime wrapper, pointed at that config.
//
// Stand-ins, because the toolkit image (nvcr.io) cannot be pulled here: the image's artifact
// tree (/artifacts/deb) is a directory of NVIDIA's Go programs built from the same module
// (runtime, hook, nvidia-ctk, nvidia-cdi-hook) plus stubs for the two C parts
// (nvidia-container-cli, libnvidia-container). The host paths the pod mounts are re-rooted
// under a temporary directory, and CDI_ENABLED is false: the installer's CDI spec and device
// nodes need a driver, and its config.toml does not depend on them (installToolkitConfig reads
// no CDI option).
func TestToolkitConfigLoadsInNVIDIAsLoader(t *testing.T) {
	peers := peer.ToolkitPeers(t)
	ctk := peer.NVIDIACtk(t)
	tested := 0
	for _, name := range cases(t) {
		p, objs := load(t, name)
		for _, o := range objs {
			ds, ok := o.Obj.(*appsv1.DaemonSet)
			if !ok || !strings.HasPrefix(ds.Name, render.NameToolkit) || container(&ds.Spec.Template.Spec, "toolkit-copy") == nil {
				continue
			}
			// gpu-container-toolkit-<pool> serves a pool whose driver has another root.
			driver := p.Spec.Driver
			for i := range p.Spec.NodePools {
				if ds.Name == render.NameToolkit+"-"+p.Spec.NodePools[i].Name {
					driver, _ = p.Spec.PoolDriver(&p.Spec.NodePools[i])
				}
			}
			tested++
			runInstaller(t, name+"/"+ds.Name, ds, driver, dropIn(t, objs), peers, ctk)
		}
	}
	if tested < 3 {
		t.Fatalf("only %d toolkit DaemonSets run NVIDIA's installer; want one per driver source at least", tested)
	}
}

// runInstaller runs NVIDIA's installer with ds's toolkit-copy environment and checks what it
// installed against driver (the driver of the nodes ds runs on) and the drop-in.
func runInstaller(t *testing.T, name string, ds *appsv1.DaemonSet, driver v1alpha1.Driver, dropInText, peers, ctk string) {
	t.Run(name, func(t *testing.T) {
		copyCtr := container(&ds.Spec.Template.Spec, "toolkit-copy")
		root := t.TempDir()
		src := artifactTree(t, root, peers, ctk)
		env := []string{"PATH=" + os.Getenv("PATH"), "TOOLKIT_SOURCE_ROOT=" + src, "TOOLKIT_PID_FILE=" + filepath.Join(root, "toolkit.pid")}
		for _, e := range copyCtr.Env {
			v := e.Value
			switch e.Name {
			case "TOOLKIT_INSTALL_DIR", "RUNTIME_CONFIG", "CONTAINERD_CONFIG", "DRIVER_ROOT_CTR_PATH":
				v = filepath.Join(root, v) // a path inside the pod: re-rooted
			case "CDI_ENABLED":
				v = "false"
			}
			env = append(env, e.Name+"="+v)
		}
		cmd := exec.Command(filepath.Join(peers, "nvidia-ctk-installer"))
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("nvidia-ctk-installer with the rendered environment: %v\n%s", err, out.String())
		}

		installed := filepath.Join(root, config.ToolkitInstallDir)
		cfgPath := filepath.Join(installed, ".config/nvidia-container-runtime/config.toml")
		load := exec.Command(filepath.Join(peers, "toolkit-config"), cfgPath)
		var stdout, stderr bytes.Buffer
		load.Stdout, load.Stderr = &stdout, &stderr
		if err := load.Run(); err != nil {
			t.Fatalf("NVIDIA's loader refuses the installed config.toml: %v\n%s", err, stderr.String())
		}
		var got loadedToolkitConfig
		if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		unroot := func(p string) string { return strings.TrimPrefix(p, root) }
		driverRoot := "/"
		if driver.Source == v1alpha1.SourceContainer {
			driverRoot = "/run/nvidia/driver"
		}
		cli := got.NVIDIAContainerCLIConfig
		if cli.Root != driverRoot || unroot(cli.Path) != config.ToolkitInstallDir+"/nvidia-container-cli" {
			t.Errorf("nvidia-container-cli root %q path %q, want the driver root %s and the installed cli", cli.Root, cli.Path, driverRoot)
		}
		if want := "@" + filepath.Join(driverRoot, "sbin/ldconfig"); cli.Ldconfig != want {
			t.Errorf("nvidia-container-cli ldconfig %q, want the driver root's %q", cli.Ldconfig, want)
		}
		if unroot(got.NVIDIACTKConfig.Path) != config.ToolkitInstallDir+"/nvidia-ctk" ||
			unroot(got.NVIDIAContainerRuntimeHookConfig.Path) != config.ToolkitInstallDir+"/nvidia-container-runtime-hook" {
			t.Errorf("nvidia-ctk %q, hook %q: want both in %s", got.NVIDIACTKConfig.Path, got.NVIDIAContainerRuntimeHookConfig.Path, config.ToolkitInstallDir)
		}
		rt := got.NVIDIAContainerRuntimeConfig
		if rt.Mode != "auto" || rt.DebugFilePath != "/dev/null" || rt.LogLevel != "info" || len(rt.Runtimes) == 0 || rt.Runtimes[0] != "runc" {
			t.Errorf("runtime: mode %q log %q level %q runtimes %v, want NVIDIA's defaults (auto, /dev/null, info, runc first)", rt.Mode, rt.DebugFilePath, rt.LogLevel, rt.Runtimes)
		}

		// The drop-in's BinaryName is the installed wrapper, which runs the runtime with
		// this config and, with no driver loaded (as here), falls back to runc.
		bin := runtimeBinary(t, dropInText)
		wrapper, err := os.ReadFile(filepath.Join(root, bin))
		if err != nil {
			t.Fatalf("the drop-in's BinaryName %s was not installed: %v", bin, err)
		}
		if !bytes.Contains(wrapper, []byte(cfgPath)) {
			t.Errorf("%s does not point the runtime at %s:\n%s", bin, cfgPath, wrapper)
		}
		if st, err := os.Stat(filepath.Join(root, bin)); err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("%s is not executable: %v", bin, err)
		}
	})
}

// artifactTree stands in for the toolkit image's /artifacts/deb: NVIDIA's Go programs, built
// from the toolkit module, and stubs for nvidia-container-cli and libnvidia-container.
func artifactTree(t *testing.T, root, peers, ctk string) string {
	t.Helper()
	src := filepath.Join(root, "artifacts")
	bin, lib := filepath.Join(src, "usr/bin"), filepath.Join(src, "usr/lib/x86_64-linux-gnu")
	for _, d := range []string{bin, lib} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, name string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	link(ctk, "nvidia-ctk")
	for _, p := range []string{"nvidia-cdi-hook", "nvidia-container-runtime", "nvidia-container-runtime-hook"} {
		link(filepath.Join(peers, p), p)
	}
	// The .cdi and .legacy runtimes are the same program in a fixed mode.
	link(filepath.Join(peers, "nvidia-container-runtime"), "nvidia-container-runtime.cdi")
	link(filepath.Join(peers, "nvidia-container-runtime"), "nvidia-container-runtime.legacy")
	stub := func(path, body string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	stub(filepath.Join(bin, "nvidia-container-cli"), "#!/bin/sh\necho 'stand-in for the C nvidia-container-cli' >&2\nexit 1\n", 0o755)
	for _, l := range []string{"libnvidia-container.so.1", "libnvidia-container-go.so.1"} {
		stub(filepath.Join(lib, l), "stand-in for the C library", 0o644)
	}
	return src
}

// runtimeBinary is the BinaryName of the nvidia handler in a rendered drop-in.
func runtimeBinary(t *testing.T, dropIn string) string {
	t.Helper()
	for line := range strings.Lines(dropIn) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && strings.TrimSpace(k) == "BinaryName" {
			return strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	t.Fatalf("no BinaryName in the drop-in:\n%s", dropIn)
	return ""
}
