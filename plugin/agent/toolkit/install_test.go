package toolkit

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/nodefacts/hostfacts"
)

const criV2 = "io.containerd.grpc.v1.cri"

// assertNodeSettingsV2 checks that the node's own settings of testdata/node-v2.toml survive.
func assertNodeSettingsV2(t *testing.T, d table) {
	t.Helper()
	cri := []string{"plugins", criV2}
	checks := []struct {
		path []string
		want any
	}{
		{append(cri, "sandbox_image"), "registry.example/pause:3.9"},
		{append(cri, "registry", "config_path"), "/etc/containerd/certs.d"},
		{append(cri, "containerd", "runtimes", "runc", "options", "SystemdCgroup"), true},
		{append(cri, "containerd", "runtimes", "kata", "runtime_type"), "io.containerd.kata.v2"},
		{append(cri, "containerd", "runtimes", "nvidia", "options", "BinaryName"), "/usr/local/nvidia/toolkit/nvidia-container-runtime"},
	}
	for _, c := range checks {
		if got := dig(d, c.path...); got != c.want {
			t.Errorf("%v = %v, want %v", c.path, got, c.want)
		}
	}
}

func newInstaller(dropIn string) *Installer {
	return &Installer{HostRoot: "/", DropInSource: dropIn, ContainerdVersion: "1.6", RestartMode: RestartNone, ProcDir: emptyProc()}
}

// emptyProc is a /proc with no containerd process: the tests run no daemon, so verification
// is by config dump (the daemon path is covered by loadedSince's own test).
func emptyProc() string {
	d, _ := os.MkdirTemp("", "proc")
	_ = os.WriteFile(filepath.Join(d, "uptime"), []byte("1000.00 1000.00\n"), 0o644)
	return d
}

// The naive drop-in loses the node's settings on containerd 1.6 (why the merge exists), the
// merged one keeps them; a second run writes nothing; a policy change and its revert leave
// no trace of the old drop-in.
func TestInstallRealContainerdV2(t *testing.T) {
	if !runInNamespace(t) {
		return
	}
	ctx := context.Background()
	copyFile(t, testdata(t, "node-v2.toml"), DefaultConfigPath)

	// Naive: the rendered drop-in imported as is.
	copyFile(t, testdata(t, "dropin-v2.toml"), "/etc/containerd/conf.d/99-gpupolicy-nvidia.toml")
	naive, err := withImport(must(os.ReadFile(DefaultConfigPath)), DefaultConfigPath, "/etc/containerd/conf.d/*.toml", 2)
	if err != nil {
		t.Fatal(err)
	}
	orig := must(os.ReadFile(DefaultConfigPath))
	_ = os.WriteFile(DefaultConfigPath, naive, 0o644)
	if got := dig(dumpNode(t), "plugins", criV2, "sandbox_image"); got == "registry.example/pause:3.9" {
		t.Fatal("expected containerd 1.6 to drop the node's sandbox_image with a naive drop-in; the merge test would prove nothing")
	}
	_ = os.WriteFile(DefaultConfigPath, orig, 0o644)
	_ = os.RemoveAll("/etc/containerd/conf.d")

	in := newInstaller(testdata(t, "dropin-v2.toml"))
	res, err := in.Install(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !installedNoCRI(res) || !res.Changed {
		t.Fatalf("first install: %+v", res)
	}
	assertNodeSettingsV2(t, dumpNode(t))
	backups, _ := filepath.Glob(DefaultConfigPath + ".gpupolicy-backup-*")
	if len(backups) != 1 || string(must(os.ReadFile(backups[0]))) != string(orig) {
		t.Fatalf("backup of the main config: %v", backups)
	}
	st, err := hostfacts.ReadToolkitStatus("/")
	if err != nil || st.Verified || len(st.Handlers) != 0 || st.Reason != res.Reason || st.DropInSHA256 != sha(must(os.ReadFile(testdata(t, "dropin-v2.toml")))) {
		t.Fatalf("status %+v (%v)", st, err)
	}

	// Idempotent: same bytes, same mtime, nothing restarted.
	path := filepath.Join("/", res.DropInPath)
	before := must(os.Stat(path)).ModTime()
	time.Sleep(20 * time.Millisecond)
	res2, err := in.Install(ctx)
	if err != nil || res2.Changed || res2.Restarted || !installedNoCRI(res2) {
		t.Fatalf("second install: %+v %v", res2, err)
	}
	if !must(os.Stat(path)).ModTime().Equal(before) {
		t.Fatal("second install rewrote the drop-in")
	}

	// setAsDefault on, then off again: the default must go away (the base excludes our file).
	in.DropInSource = testdata(t, "dropin-v2-default.toml")
	if res, err = in.Install(ctx); err != nil || !res.Changed {
		t.Fatalf("policy change: %+v %v", res, err)
	}
	if got := dig(dumpNode(t), "plugins", criV2, "containerd", "default_runtime_name"); got != "nvidia" {
		t.Fatalf("default_runtime_name = %v", got)
	}
	in.DropInSource = testdata(t, "dropin-v2.toml")
	if _, err = in.Install(ctx); err != nil {
		t.Fatal(err)
	}
	d := dumpNode(t)
	if got := dig(d, "plugins", criV2, "containerd", "default_runtime_name"); got != "runc" {
		t.Fatalf("after revert default_runtime_name = %v, want runc", got)
	}
	assertNodeSettingsV2(t, d)

	// Uninstall is explicit and leaves the node's own config working.
	if removed, err := in.Uninstall(ctx); err != nil || !removed {
		t.Fatalf("uninstall: %v %v", removed, err)
	}
	d = dumpNode(t)
	if dig(d, "plugins", criV2, "containerd", "runtimes", "nvidia") != nil || dig(d, "plugins", criV2, "sandbox_image") != "registry.example/pause:3.9" {
		t.Fatal("after uninstall: nvidia still present or node settings lost")
	}
	if _, err := hostfacts.ReadToolkitStatus("/"); err != hostfacts.ErrNoToolkitStatus {
		t.Fatalf("status after uninstall: %v", err)
	}
}

// Another import that touches the CRI table, a relative import and comments in the main config.
func TestInstallRealContainerdV2OtherImports(t *testing.T) {
	if !runInNamespace(t) {
		return
	}
	main := "# node config\nversion = 2\nimports = [\"extra/*.toml\"] # site settings\n" +
		string(must(os.ReadFile(testdata(t, "node-v2.toml"))))[len("# The node's own containerd 1.x config, as a distribution or kubeadm leaves it.\nversion = 2\n"):]
	if err := os.WriteFile(DefaultConfigPath, []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	// A site import after the main config: its CRI table replaces the main one, as containerd
	// 1.6 does, so its cni setting and the node's own settings must all survive.
	site := string(must(os.ReadFile(testdata(t, "node-v2.toml")))) +
		"\n[plugins.\"io.containerd.grpc.v1.cri\".cni]\n  conf_dir = \"/etc/site/cni\"\n"
	if err := os.MkdirAll("/etc/containerd/extra", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("/etc/containerd/extra/10-site.toml", []byte(site), 0o644); err != nil {
		t.Fatal(err)
	}

	res, err := newInstaller(testdata(t, "dropin-v2.toml")).Install(context.Background())
	if err != nil || !installedNoCRI(res) {
		t.Fatalf("install: %+v %v", res, err)
	}
	d := dumpNode(t)
	assertNodeSettingsV2(t, d)
	if got := dig(d, "plugins", criV2, "cni", "conf_dir"); got != "/etc/site/cni" {
		t.Fatalf("site import setting lost: cni.conf_dir = %v", got)
	}
	text := string(must(os.ReadFile(DefaultConfigPath)))
	if want := `imports = ["extra/*.toml", "/etc/containerd/conf.d/*.toml"] # site settings`; !contains(text, want) || !contains(text, "# node config") {
		t.Fatalf("main config edit lost comments or order:\n%s", text)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// The policy's containerd version must agree with the node's binary on the config schema.
func TestVersionMismatchIsAnError(t *testing.T) {
	if _, err := os.Stat("/usr/bin/containerd"); err != nil {
		t.Skip("containerd is not installed (apt-get install -y containerd)")
	}
	in := newInstaller(testdata(t, "dropin-v3.toml"))
	in.ContainerdVersion = "2.1"
	_, _, err := in.version(context.Background())
	if err == nil || !contains(err.Error(), "rendered for the wrong containerd") {
		t.Fatalf("want a version mismatch error, got %v", err)
	}
}

// A node without a main config (containerd on built-in defaults) gets one that only imports
// the drop-in directory; the defaults stay in force.
func TestInstallRealContainerdNoMainConfig(t *testing.T) {
	if !runInNamespace(t) {
		return
	}
	res, err := newInstaller(testdata(t, "dropin-v2.toml")).Install(context.Background())
	if err != nil || !installedNoCRI(res) {
		t.Fatalf("install: %+v %v", res, err)
	}
	if got := string(must(os.ReadFile(DefaultConfigPath))); got != "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n" {
		t.Fatalf("created main config %q", got)
	}
	d := dumpNode(t)
	if dig(d, "plugins", criV2, "containerd", "runtimes", "nvidia") == nil || dig(d, "plugins", criV2, "containerd", "runtimes", "runc") == nil {
		t.Fatal("nvidia or the default runc runtime missing")
	}
}

// A version 1 main config is refused before anything changes: containerd 1.6 cannot load a
// version 1 main config importing a version 2 drop-in, and a config it cannot load stops it.
func TestInstallRealContainerdV1MainConfig(t *testing.T) {
	if !runInNamespace(t) {
		return
	}
	v1 := "[plugins.cri]\n  sandbox_image = \"registry.example/pause:3.9\"\n"
	if err := os.WriteFile(DefaultConfigPath, []byte(v1), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := newInstaller(testdata(t, "dropin-v2.toml")).Install(context.Background())
	if err == nil || !contains(err.Error(), "version 1") {
		t.Fatalf("want a version 1 refusal, got %v", err)
	}
	if got := string(must(os.ReadFile(DefaultConfigPath))); got != v1 {
		t.Fatalf("main config changed: %q", got)
	}
	if _, err := os.Stat("/etc/containerd/conf.d"); !os.IsNotExist(err) {
		t.Fatal("drop-in directory created")
	}
	if got := dig(dumpNode(t), "plugins", criV2, "sandbox_image"); got != "registry.example/pause:3.9" {
		t.Fatalf("node config broken: sandbox_image = %v", got)
	}
}

// A rendered drop-in containerd cannot load is refused by the preflight dump; the node's
// files stay as they were.
func TestInstallRealContainerdPreflight(t *testing.T) {
	if !runInNamespace(t) {
		return
	}
	copyFile(t, testdata(t, "node-v2.toml"), DefaultConfigPath)
	bad := filepath.Join(t.TempDir(), "bad.toml")
	// Valid TOML, but a plugin key containerd 1.6 rejects.
	if err := os.WriteFile(bad, []byte("version = 2\n[plugins.cri.containerd.runtimes.nvidia]\n  runtime_type = \"io.containerd.runc.v2\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := string(must(os.ReadFile(DefaultConfigPath)))
	_, err := newInstaller(bad).Install(context.Background())
	if err == nil || !contains(err.Error(), "containerd refused the drop-in") || !contains(err.Error(), "nothing was written") {
		t.Fatalf("want a preflight refusal, got %v", err)
	}
	if st, serr := hostfacts.ReadToolkitStatus("/"); serr != nil || st.Verified || st.Reason != err.Error() {
		t.Fatalf("status does not record the refusal: %+v %v", st, serr)
	}
	if string(must(os.ReadFile(DefaultConfigPath))) != before {
		t.Fatal("main config changed")
	}
	if _, err := os.Stat("/etc/containerd/conf.d/99-gpupolicy-nvidia.toml"); !os.IsNotExist(err) {
		t.Fatal("drop-in written")
	}
}
