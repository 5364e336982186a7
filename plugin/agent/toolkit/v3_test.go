package toolkit

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	srvconfig "github.com/containerd/containerd/v2/cmd/containerd/server/config"
)

// loadV3 loads hostRoot's main config with containerd 2's own loader (imports resolved on
// the host paths, so the test root's paths are rewritten by pointing imports at it).
func loadV3(t *testing.T, root string) *srvconfig.Config {
	t.Helper()
	// The main config imports /etc/containerd/conf.d/*.toml (a host path); resolve it inside
	// the test root by loading a copy whose imports are the rooted paths.
	mainPath := filepath.Join(root, DefaultConfigPath)
	main, err := parseTOML("main", must(os.ReadFile(mainPath)))
	if err != nil {
		t.Fatal(err)
	}
	var rooted []any
	for _, p := range importPatterns(main, DefaultConfigPath) {
		rooted = append(rooted, filepath.Join(root, p))
	}
	main["imports"] = rooted
	b, err := encode("", main)
	if err != nil {
		t.Fatal(err)
	}
	load := filepath.Join(root, "load.toml")
	if err := os.WriteFile(load, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var cfg srvconfig.Config
	if err := srvconfig.LoadConfig(context.Background(), load, &cfg); err != nil {
		t.Fatalf("containerd v2 loader: %v", err)
	}
	return &cfg
}

func TestInstallConfigV3(t *testing.T) {
	for _, version := range []string{"2.0", "2.1"} {
		t.Run(version, func(t *testing.T) {
			root := t.TempDir()
			copyFile(t, testdata(t, "node-v3.toml"), filepath.Join(root, DefaultConfigPath))
			in := &Installer{HostRoot: root, DropInSource: testdata(t, "dropin-v3.toml"), ContainerdVersion: version,
				RestartMode: RestartNone, ContainerdBinary: NoBinary, ProcDir: emptyProc()}
			res, err := in.Install(context.Background())
			if err != nil || !installedNoCRI(res) {
				t.Fatalf("install: %+v %v", res, err)
			}
			installed := string(must(os.ReadFile(filepath.Join(root, res.DropInPath))))
			if merged := contains(installed, "kata"); merged != (version == "2.0") {
				t.Fatalf("containerd %s: merged=%v, want merge only below 2.1:\n%s", version, merged, installed)
			}
			cfg := loadV3(t, root)
			if cfg.Version != 3 {
				t.Fatalf("version %d", cfg.Version)
			}
			d := table{"plugins": cfg.Plugins}
			for path, want := range map[string]any{
				"io.containerd.cri.v1.runtime/containerd/runtimes/nvidia/options/BinaryName":  "/usr/local/nvidia/toolkit/nvidia-container-runtime",
				"io.containerd.cri.v1.runtime/containerd/runtimes/runc/options/SystemdCgroup": true,
				"io.containerd.cri.v1.runtime/containerd/runtimes/kata/runtime_type":          "io.containerd.kata.v2",
				"io.containerd.cri.v1.images/pinned_images/sandbox":                           "registry.example/pause:3.10",
				"io.containerd.cri.v1.images/registry/config_path":                            "/etc/containerd/certs.d",
			} {
				keys := append([]string{"plugins"}, splitPath(path)...)
				if got := dig(d, keys...); got != want {
					t.Errorf("%s = %v, want %v", path, got, want)
				}
			}
		})
	}
}

func splitPath(p string) []string {
	var out []string
	start := 0
	for i := range len(p) {
		if p[i] == '/' {
			out = append(out, p[start:i])
			start = i + 1
		}
	}
	return append(out, p[start:])
}
