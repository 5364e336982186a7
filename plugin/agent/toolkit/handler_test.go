package toolkit

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLowLevelRuntime(t *testing.T) {
	for _, c := range []struct{ name, cri, want string }{
		{"runc", `[containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"`, "runc"},
		{"the default runtime first", `[containerd]
default_runtime_name = "crun"
[containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"
[containerd.runtimes.crun]
runtime_type = "io.containerd.runc.v2"`, "crun"},
		{"an nvidia default is passed over", `[containerd]
default_runtime_name = "nvidia-cdi"
[containerd.runtimes.nvidia-cdi]
runtime_type = "io.containerd.runc.v2"
[containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"`, "runc"},
		{"another shim is passed over", `[containerd]
default_runtime_name = "kata"
[containerd.runtimes.kata]
runtime_type = "io.containerd.kata.v2"
[containerd.runtimes.crun]
runtime_type = "io.containerd.runc.v2"`, "crun"},
		{"runtime_type left to the default", `[containerd.runtimes.runc.options]
SystemdCgroup = true`, "runc"},
		{"none", `[containerd.runtimes.kata]
runtime_type = "io.containerd.kata.v2"`, ""},
	} {
		cri, err := parseTOML(c.name, []byte(c.cri))
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := lowLevelRuntime(cri); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// A dump always lists containerd's own runc runtime: one that names no runc-based runtime says
// the node's runc settings cannot be known, and the install stops before writing. From files,
// no runtime means containerd's defaults, which the handler then shares by inheriting nothing.
func TestInheritHandlers(t *testing.T) {
	rendered, err := parseTOML("rendered", []byte(renderedDropIn(3)))
	if err != nil {
		t.Fatal(err)
	}
	kataOnly, _ := parseTOML("node", []byte(`[plugins."io.containerd.cri.v1.runtime".containerd]
default_runtime_name = "kata"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.kata]
runtime_type = "io.containerd.kata.v2"`))
	_, _, err = inheritHandlers(rendered, subTable(kataOnly, "plugins"), 3, true)
	if err == nil || !strings.Contains(err.Error(), `no runc-based runtime`) || !strings.Contains(err.Error(), "[kata]") || !strings.Contains(err.Error(), "SystemdCgroup") {
		t.Fatalf("dump without runc: %v", err)
	}
	out, source, err := inheritHandlers(rendered, subTable(kataOnly, "plugins"), 3, false)
	if err != nil || source != "" {
		t.Fatalf("files without runc: %q, %v", source, err)
	}
	if h := dig(out, "plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes", "nvidia").(table); len(h) != 2 || len(h["options"].(table)) != 1 {
		t.Fatalf("handler without a node runtime: %v", h)
	}
	// The rendered table is not changed in place (the installer keeps it for the status).
	node, _ := parseTOML("node", []byte(`[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
SystemdCgroup = true`))
	if _, source, err = inheritHandlers(rendered, subTable(node, "plugins"), 3, true); err != nil || source != "runc" {
		t.Fatalf("runc: %q, %v", source, err)
	}
	if _, ok := dig(rendered, "plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes", "nvidia", "options", "SystemdCgroup").(bool); ok {
		t.Fatal("inheritHandlers changed the rendered table")
	}
}

// The installed file says which node runtime the handler started from, and holds its settings.
func TestInstalledHandlerNamesItsSource(t *testing.T) {
	root := t.TempDir()
	cfg := filepath.Join(root, DefaultConfigPath)
	if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
		t.Fatal(err)
	}
	node := "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n"
	if err := os.WriteFile(cfg, []byte(node), 0o644); err != nil {
		t.Fatal(err)
	}
	dropIn := filepath.Join(t.TempDir(), "drop-in.toml")
	if err := os.WriteFile(dropIn, []byte(renderedDropIn(3)), 0o644); err != nil {
		t.Fatal(err)
	}
	in := &Installer{HostRoot: root, DropInSource: dropIn, ContainerdVersion: "2.1", RestartMode: RestartNone, ContainerdBinary: NoBinary, ProcDir: emptyProc()}
	res, err := in.Install(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	installed := string(must(os.ReadFile(filepath.Join(root, res.DropInPath))))
	if !strings.Contains(installed, `# Runtime handlers start from this node's "runc" runtime (from config files)`) {
		t.Fatalf("header does not name the source:\n%s", installed)
	}
	got, err := parseTOML("installed", []byte(installed))
	if err != nil {
		t.Fatal(err)
	}
	if v := dig(got, "plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes", "nvidia", "options", "SystemdCgroup"); v != true {
		t.Fatalf("SystemdCgroup of the installed handler: %v\n%s", v, installed)
	}
}
