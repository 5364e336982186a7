package toolkit

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/nodefacts/hostfacts"
)

// flatcarTarget is where Flatcar keeps containerd's config; /etc/containerd/config.toml is an
// absolute link to it.
const flatcarTarget = "/usr/share/containerd/config.toml"

// flatcarHost is a host root laid out like a Flatcar node (the node's own config,
// testdata/node-v2.toml, behind the absolute link), holding the real containerd binary and the
// libraries it loads, so `containerd config dump` runs chrooted in it as on the node.
func flatcarHost(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("chroot into a fake host root needs root")
	}
	bin, err := exec.LookPath("containerd")
	if err != nil {
		t.Skip("containerd is not installed (apt-get install -y containerd)")
	}
	root := t.TempDir()
	copyFile(t, testdata(t, "node-v2.toml"), filepath.Join(root, flatcarTarget))
	link(t, root, DefaultConfigPath, flatcarTarget)
	dst := filepath.Join(root, "/usr/bin/containerd")
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(bin, dst); err != nil { // 48 MB: a hard link where the file system allows
		copyFile(t, bin, dst)
		if err := os.Chmod(dst, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		t.Skipf("ldd %s: %v", bin, err)
	}
	for _, f := range strings.Fields(string(out)) {
		if strings.HasPrefix(f, "/") {
			copyInto(t, root, f, f)
		}
	}
	return root
}

func link(t *testing.T, root, hostPath, target string) {
	t.Helper()
	p := filepath.Join(root, hostPath)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

// assertLink fails unless hostPath is still the link to target.
func assertLink(t *testing.T, root, hostPath, target string) {
	t.Helper()
	if got, err := os.Readlink(filepath.Join(root, hostPath)); err != nil || got != target {
		t.Fatalf("%s is no longer the link to %s: %q %v", hostPath, target, got, err)
	}
}

// The Flatcar layout on containerd 1.6: the merge reads the node's real config through the
// absolute link (its sandbox_image, SystemdCgroup, extra runtime and registry config_path
// survive in containerd's own dump), the import is written through the link into its target,
// the link stays, and the backup of the node's bytes is beside the link's name.
func TestInstallFlatcarConfigLink(t *testing.T) {
	root := flatcarHost(t)
	orig := string(must(os.ReadFile(filepath.Join(root, flatcarTarget))))
	in := &Installer{HostRoot: root, DropInSource: testdata(t, "dropin-v2.toml"), ContainerdVersion: "1.6",
		RestartMode: RestartNone, ProcDir: emptyProc()}
	ctx := context.Background()
	res, err := in.Install(ctx)
	if err != nil || !installedNoCRI(res) || !res.Changed {
		t.Fatalf("install: %+v %v", res, err)
	}
	assertLink(t, root, DefaultConfigPath, flatcarTarget)
	target := string(must(os.ReadFile(filepath.Join(root, flatcarTarget))))
	if !contains(target, `imports = ["/etc/containerd/conf.d/*.toml"]`) || !contains(target, `sandbox_image = "registry.example/pause:3.9"`) {
		t.Fatalf("link target after install:\n%s", target)
	}
	out, err := Host{Root: root}.dump(ctx, "/usr/bin/containerd", DefaultConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	d := must(parseTOML("dump", out))
	assertNodeSettingsV2(t, d)
	backups, _ := filepath.Glob(filepath.Join(root, DefaultConfigPath+".gpupolicy-backup-*"))
	if len(backups) != 1 || string(must(os.ReadFile(backups[0]))) != orig {
		t.Fatalf("backup of the node's config beside the link: %v", backups)
	}
	if res, err = in.Install(ctx); err != nil || res.Changed || !installedNoCRI(res) {
		t.Fatalf("second install: %+v %v", res, err)
	}
	if removed, err := in.Uninstall(ctx); err != nil || !removed {
		t.Fatalf("uninstall: %v %v", removed, err)
	}
	assertLink(t, root, DefaultConfigPath, flatcarTarget)
}

// With /usr read-only, as on Flatcar, the install refuses before anything changes and says to
// replace the link with a copy; the node's files are exactly as they were.
func TestInstallFlatcarReadOnlyUsr(t *testing.T) {
	if !runInNamespace(t) {
		return
	}
	root := flatcarHost(t)
	usr := filepath.Join(root, "/usr")
	if err := unix.Mount(usr, usr, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(usr, unix.MNT_DETACH) })
	if err := unix.Mount("", usr, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, root)
	in := &Installer{HostRoot: root, DropInSource: testdata(t, "dropin-v2.toml"), ContainerdVersion: "1.6",
		RestartMode: RestartNone, ProcDir: emptyProc()}
	_, err := in.Install(context.Background())
	want := "host path /etc/containerd/config.toml is a symbolic link to /usr/share/containerd/config.toml, and directory /usr/share/containerd cannot be written (read-only file system): gpupolicy writes through links to the file they name and keeps the link, so that file must be writable; replace the link with a copy of its target (cp --remove-destination /usr/share/containerd/config.toml /etc/containerd/config.toml: the node keeps its settings, and the copy no longer follows OS updates of the target), and retry"
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.HasSuffix(err.Error(), "nothing on the node was changed") {
		t.Fatalf("got %v\nwant %s ... nothing on the node was changed", err, want)
	}
	assertSame(t, before, snapshot(t, root))
}

// Links in every host path the installer uses: the main config (relative, and with ".." above
// the root), the drop-in directory, the status file's directory (absolute). The files land
// where the links lead inside the root, the links stay, and the merge reads the node's real
// config (no containerd binary: the files are merged as containerd 1.6 imports them).
func TestInstallThroughLinks(t *testing.T) {
	for _, c := range []struct {
		name   string
		links  [][2]string // host path, target
		dirs   []string
		dropIn string // where the drop-in must land (a host path)
		status string // where the status file must land
	}{
		{name: "relative config link", links: [][2]string{{DefaultConfigPath, "../../usr/share/containerd/config.toml"}}},
		{name: "config link climbing above the root", links: [][2]string{{DefaultConfigPath, "../../../../../../../usr/share/containerd/config.toml"}}},
		{name: "absolute config link", links: [][2]string{{DefaultConfigPath, flatcarTarget}}},
		{
			name:   "drop-in directory link",
			links:  [][2]string{{DefaultConfigPath, flatcarTarget}, {DefaultDropInDir, "/opt/gpupolicy-test/conf.d"}},
			dirs:   []string{"/opt/gpupolicy-test/conf.d"},
			dropIn: "/opt/gpupolicy-test/conf.d/" + config.DropInFile,
		},
		{
			name:   "status directory link",
			links:  [][2]string{{DefaultConfigPath, flatcarTarget}, {filepath.Dir(config.ToolkitStatusFile), "/run/gpupolicy-test-state"}},
			dirs:   []string{"/run/gpupolicy-test-state"},
			status: "/run/gpupolicy-test-state/" + filepath.Base(config.ToolkitStatusFile),
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			copyFile(t, testdata(t, "node-v2.toml"), filepath.Join(root, flatcarTarget))
			for _, d := range c.dirs {
				if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for _, l := range c.links {
				link(t, root, l[0], l[1])
			}
			in := &Installer{HostRoot: root, DropInSource: testdata(t, "dropin-v2.toml"), ContainerdVersion: "1.6",
				RestartMode: RestartNone, ContainerdBinary: NoBinary, ProcDir: emptyProc()}
			res, err := in.Install(context.Background())
			if err != nil || !installedNoCRI(res) {
				t.Fatalf("install: %+v %v", res, err)
			}
			for _, l := range c.links {
				assertLink(t, root, l[0], l[1])
			}
			dropIn := c.dropIn
			if dropIn == "" {
				dropIn = filepath.Join(DefaultDropInDir, config.DropInFile)
			}
			installed := must(parseTOML("drop-in", must(os.ReadFile(filepath.Join(root, dropIn)))))
			assertNodeSettingsV2(t, installed)
			if !contains(string(must(os.ReadFile(filepath.Join(root, flatcarTarget)))), "imports = [") {
				t.Fatal("the import was not written into the link's target")
			}
			status := c.status
			if status == "" {
				status = config.ToolkitStatusFile
			}
			if _, err := os.Stat(filepath.Join(root, status)); err != nil {
				t.Fatalf("status file not at %s: %v", status, err)
			}
			if _, err := hostfacts.ReadToolkitStatus(root); err != nil {
				t.Fatalf("status through the link: %v", err)
			}
			if removed, err := in.Uninstall(context.Background()); err != nil || !removed {
				t.Fatalf("uninstall: %v %v", removed, err)
			}
			for _, p := range []string{dropIn, status} {
				if _, err := os.Lstat(filepath.Join(root, p)); !os.IsNotExist(err) {
					t.Fatalf("%s after uninstall: %v", p, err)
				}
			}
			for _, l := range c.links {
				assertLink(t, root, l[0], l[1])
			}
		})
	}
}

// Dangling and looping links in the config, drop-in directory, status file and CDI spec
// directory: a clear error naming the path and the link, and nothing on the node changes.
func TestInstallRefusesBadLinks(t *testing.T) {
	for _, c := range []struct {
		name  string
		links [][2]string
		cdi   bool
		want  string
	}{
		{name: "dangling config", links: [][2]string{{DefaultConfigPath, flatcarTarget + ".missing"}},
			want: "host path /etc/containerd/config.toml under --host-root ROOT: symbolic link /etc/containerd/config.toml -> /usr/share/containerd/config.toml.missing points to nothing on the host: gpupolicy does not create files through a dangling link"},
		{name: "looping config", links: [][2]string{{DefaultConfigPath, "config.d.toml"}, {"/etc/containerd/config.d.toml", "/etc/containerd/config.toml"}},
			want: "host path /etc/containerd/config.toml under --host-root ROOT: more than 40 symbolic links (a loop; the last one followed is"},
		{name: "dangling drop-in directory", links: [][2]string{{DefaultDropInDir, "/opt/gpupolicy-test/missing"}},
			want: "host path /etc/containerd/conf.d/99-gpupolicy-nvidia.toml under --host-root ROOT: symbolic link /etc/containerd/conf.d -> /opt/gpupolicy-test/missing points to nothing"},
		{name: "looping status directory", links: [][2]string{{filepath.Dir(config.ToolkitStatusFile), "gpupolicy"}},
			want: "host path /var/lib/gpupolicy/toolkit-status.json under --host-root ROOT: more than 40 symbolic links (a loop; the last one followed is /var/lib/gpupolicy -> gpupolicy)"},
		{name: "dangling CDI directory", cdi: true, links: [][2]string{{"/var/run", "/gpupolicy-test-run"}},
			want: "host path /var/run/cdi/nvidia.yaml under --host-root ROOT: symbolic link /var/run -> /gpupolicy-test-run points to nothing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			copyFile(t, testdata(t, "node-v2.toml"), filepath.Join(root, "/etc/containerd/node.toml"))
			for _, l := range c.links {
				link(t, root, l[0], l[1])
			}
			in := &Installer{HostRoot: root, DropInSource: testdata(t, "dropin-v2.toml"), ContainerdVersion: "1.6",
				RestartMode: RestartNone, ContainerdBinary: NoBinary, ProcDir: emptyProc()}
			if c.cdi {
				in.CDISpec = config.CDISpecFile
			}
			before := snapshot(t, root)
			_, err := in.Install(context.Background())
			if want := strings.ReplaceAll(c.want, "ROOT", root); err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("got %v\nwant %s", err, want)
			}
			assertSame(t, before, snapshot(t, root))
		})
	}
}

// snapshot records every entry under root: links by target, files by content.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			out[p] = "-> " + must(os.Readlink(p))
		case d.IsDir():
			out[p] = "dir"
		case d.Type().IsRegular() && d.Name() != "containerd":
			out[p] = string(must(os.ReadFile(p)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func assertSame(t *testing.T, before, after map[string]string) {
	t.Helper()
	for p, v := range after {
		if before[p] != v {
			t.Errorf("changed on the node: %s", p)
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			t.Errorf("removed from the node: %s", p)
		}
	}
}

// A symbolic link at a file gpupolicy owns (the drop-in, the status file, the CDI spec, the
// scratch files) is refused with the link, its target and the fix before anything is written,
// by install and by uninstall: written through, a link to /etc/passwd would have the drop-in
// overwrite it.
func TestInstallRefusesLinkAtOwnedFile(t *testing.T) {
	dropIn := filepath.Join(DefaultDropInDir, config.DropInFile)
	for _, c := range []struct {
		name, at string
		cdi      bool
	}{
		{name: "drop-in", at: dropIn},
		{name: "status file", at: config.ToolkitStatusFile},
		{name: "CDI spec", at: config.CDISpecFile, cdi: true},
		{name: "CDI scratch", at: cdiScratch, cdi: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			copyFile(t, testdata(t, "node-v2.toml"), filepath.Join(root, DefaultConfigPath))
			if err := os.WriteFile(filepath.Join(root, "/etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			link(t, root, c.at, "/etc/passwd")
			in := &Installer{HostRoot: root, DropInSource: testdata(t, "dropin-v2.toml"), ContainerdVersion: "1.6",
				RestartMode: RestartNone, ContainerdBinary: NoBinary, ProcDir: emptyProc()}
			if c.cdi {
				in.CDISpec = config.CDISpecFile
			}
			want := "host path " + c.at + " under --host-root " + root + " is a symbolic link to /etc/passwd: gpupolicy creates this file itself and never writes or removes it through a link (the link could make it overwrite any file on the node); remove the link (rm " + c.at + " on the node), and retry; nothing on the node was changed"
			before := snapshot(t, root)
			if _, err := in.Install(context.Background()); err == nil || err.Error() != want {
				t.Fatalf("install: got %v\nwant %s", err, want)
			}
			assertSame(t, before, snapshot(t, root))
			if c.at == cdiScratch {
				return // uninstall never touches the scratch file
			}
			if _, err := in.Uninstall(context.Background()); err == nil || err.Error() != want {
				t.Fatalf("uninstall: got %v\nwant %s", err, want)
			}
			assertSame(t, before, snapshot(t, root))
		})
	}
}
