package toolkit

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	srvconfig "github.com/containerd/containerd/v2/cmd/containerd/server/config"
)

// Why a version 2 node config is refused on containerd 2.x (checkNodeConfig): containerd 2's
// own loader migrates a file only when it is older than what it loaded before it, so a version
// 2 main config followed by the version 3 drop-in leaves the node's settings under the old
// plugin names, which containerd 2 no longer reads, while the drop-in's runtime lands under the
// new ones. The node would silently lose its sandbox image, cgroup driver and runtimes.
func TestContainerd2LoaderDropsAVersion2MainUnderAVersion3Import(t *testing.T) {
	dir := t.TempDir()
	dropIn := filepath.Join(dir, "99-nvidia.toml")
	main := filepath.Join(dir, "config.toml")
	writeTestFile(t, dropIn, `version = 3
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
`)
	writeTestFile(t, main, `version = 2
imports = ["`+dropIn+`"]
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.example/pause:3.10"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
`)
	var cfg srvconfig.Config
	if err := srvconfig.LoadConfig(context.Background(), main, &cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.MigrateConfig(context.Background()); err != nil {
		t.Fatal(err)
	}
	d := table{"plugins": cfg.Plugins}
	if got := dig(d, "plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes", "nvidia", "runtime_type"); got != "io.containerd.runc.v2" {
		t.Fatalf("the drop-in's runtime is missing: %v", got)
	}
	if got := dig(d, "plugins", "io.containerd.grpc.v1.cri", "sandbox_image"); got != "registry.example/pause:3.10" {
		t.Fatalf("the main config's settings were not loaded at all: sandbox_image = %v", got)
	}
	if got := dig(d, "plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes", "runc", "options", "SystemdCgroup"); got != nil {
		t.Fatalf("containerd migrated the version 2 main config after all (SystemdCgroup = %v): the refusal in checkNodeConfig may be relaxed", got)
	}
	if got := dig(d, "plugins", "io.containerd.cri.v1.images", "pinned_images", "sandbox"); got != nil {
		t.Fatalf("containerd migrated the version 2 main config after all (sandbox = %v)", got)
	}
}

func writeTestFile(t *testing.T, p, body string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
