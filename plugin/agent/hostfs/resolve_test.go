package hostfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// hostTree builds a fake host root: each entry is a host path and either "dir", "file" or
// "-> target" (a symbolic link, written as is).
func hostTree(t testing.TB, entries ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, e := range entries {
		path, kind, _ := strings.Cut(e, " ")
		local := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(local), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case kind == "dir":
			err = os.Mkdir(local, 0o755)
		case kind == "file":
			err = os.WriteFile(local, []byte(path), 0o644)
		case strings.HasPrefix(kind, "-> "):
			err = os.Symlink(strings.TrimPrefix(kind, "-> "), local)
		default:
			t.Fatalf("entry %q", e)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// A Flatcar-like node: absolute and relative links, ".." in targets, dangling and looping links.
var flatcar = []string{
	"/usr/share/containerd/config.toml file",
	"/etc/containerd/config.toml -> /usr/share/containerd/config.toml",
	"/etc/containerd/rel.toml -> ../../usr/share/containerd/config.toml",
	"/etc/containerd/above.toml -> ../../../../../../usr/share/containerd/config.toml",
	"/etc/containerd/conf.d -> /opt/containerd/conf.d",
	"/opt/containerd/conf.d dir",
	"/etc/containerd/dangling.toml -> /usr/share/containerd/missing.toml",
	"/etc/containerd/dangling.d -> ../../nowhere/conf.d",
	"/etc/containerd/loop.toml -> loop2.toml",
	"/etc/containerd/loop2.toml -> /etc/containerd/loop.toml",
	"/etc/containerd/self -> self",
	"/etc/containerd/passwd -> /etc/passwd",
	"/etc/containerd/file/ -> /usr/share/containerd/config.toml/",
	"/var/run -> ../run",
	"/run/cdi dir",
	"/etc/share -> /usr/share/containerd",
	"/usr/x file",
}

func TestResolveInsideRoot(t *testing.T) {
	root := hostTree(t, flatcar...)
	for _, c := range []struct{ path, real string }{
		{"/etc/containerd/config.toml", "/usr/share/containerd/config.toml"},
		{"etc/containerd/config.toml", "/usr/share/containerd/config.toml"},
		{"/etc/containerd/rel.toml", "/usr/share/containerd/config.toml"},
		{"/etc/containerd/above.toml", "/usr/share/containerd/config.toml"},
		{"/../../etc/containerd/config.toml", "/usr/share/containerd/config.toml"},
		{"/etc/containerd/conf.d/99-gpupolicy-nvidia.toml", "/opt/containerd/conf.d/99-gpupolicy-nvidia.toml"},
		{"/etc/containerd/conf.d/new/deeper.toml", "/opt/containerd/conf.d/new/deeper.toml"},
		{"/var/run/cdi/nvidia.yaml", "/run/cdi/nvidia.yaml"},
		{"/etc/missing/dir/file", "/etc/missing/dir/file"},
		// ".." after a link leaves the link's target, as the kernel does (physically).
		{"/etc/share/../../x", "/usr/x"},
		{"/", "/"},
	} {
		p, err := Resolve(root, c.path)
		if err != nil || p.Real != c.real || p.Local() != filepath.Join(root, c.real) {
			t.Errorf("Resolve(%q) = %+v, %v; want Real %s", c.path, p, err, c.real)
		}
	}
	for _, c := range []struct {
		path string
		err  error
		msg  string
	}{
		{"/etc/containerd/dangling.toml", ErrDanglingLink, "symbolic link /etc/containerd/dangling.toml -> /usr/share/containerd/missing.toml points to nothing on the host"},
		{"/etc/containerd/dangling.d/99-gpupolicy-nvidia.toml", ErrDanglingLink, "/etc/containerd/dangling.d -> ../../nowhere/conf.d"},
		// The container's own /etc/passwd must not stand in for the host's.
		{"/etc/containerd/passwd", ErrDanglingLink, "-> /etc/passwd points to nothing"},
		{"/etc/containerd/loop.toml", ErrLinkLoop, "more than 40 symbolic links (a loop"},
		{"/etc/containerd/self/x", ErrLinkLoop, "/etc/containerd/self -> self"},
		{"/etc/containerd/file/", ErrNotDir, "/usr/share/containerd/config.toml is a file where a directory must be"},
		{"/usr/x/y", ErrNotDir, "/usr/x is a file where a directory must be: move that file away"},
	} {
		_, err := Resolve(root, c.path)
		if !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.msg) || !strings.Contains(err.Error(), "host path "+c.path) {
			t.Errorf("Resolve(%q): %v; want %v with %q", c.path, err, c.err, c.msg)
		}
	}
}

// A write through a link replaces the file the link names and keeps the link; Remove takes
// the link, not its target; a read-only target is refused before anything is created.
func TestWriteThroughLink(t *testing.T) {
	root := hostTree(t, flatcar...)
	wrote, err := Writer{}.WriteFile(root, "/etc/containerd/config.toml", []byte("version = 2\n"), 0o644)
	if err != nil || !wrote {
		t.Fatalf("write: %v %v", wrote, err)
	}
	if target, err := os.Readlink(filepath.Join(root, "/etc/containerd/config.toml")); err != nil || target != "/usr/share/containerd/config.toml" {
		t.Fatalf("link replaced: %q %v", target, err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "/usr/share/containerd/config.toml")); string(b) != "version = 2\n" {
		t.Fatalf("target holds %q", b)
	}
	if _, err := (Writer{}).WriteFile(root, "/etc/containerd/dangling.toml", []byte("x"), 0o644); !errors.Is(err, ErrDanglingLink) {
		t.Fatalf("write through a dangling link: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "/usr/share/containerd/missing.toml")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("dangling link's target created")
	}
	if b, err := ReadFile(root, "/etc/containerd/rel.toml"); err != nil || string(b) != "version = 2\n" {
		t.Fatalf("read through relative link: %q %v", b, err)
	}
	if _, err := ReadFile(root, "/etc/containerd/missing.toml"); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "read /etc/containerd/missing.toml") {
		t.Fatalf("missing file: %v", err)
	}
	if removed, err := (Writer{}).Remove(root, "/etc/containerd/rel.toml"); err != nil || !removed {
		t.Fatalf("remove link: %v %v", removed, err)
	}
	if _, err := os.Stat(filepath.Join(root, "/usr/share/containerd/config.toml")); err != nil {
		t.Fatal("Remove of a link removed its target")
	}
	if removed, err := (Writer{}).Remove(root, "/etc/containerd/conf.d/absent.toml"); err != nil || removed {
		t.Fatalf("remove absent through a linked directory: %v %v", removed, err)
	}
	matches, err := Glob(root, "/etc/containerd/conf.d/*.toml")
	if err != nil || len(matches) != 0 {
		t.Fatalf("glob of an empty linked directory: %v %v", matches, err)
	}
	if _, err := (Writer{}).WriteFile(root, "/etc/containerd/conf.d/10-a.toml", []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	if matches, err = Glob(root, "/etc/*/conf.d/*.toml"); err != nil || len(matches) != 1 || matches[0] != "/etc/containerd/conf.d/10-a.toml" {
		t.Fatalf("glob through a linked directory: %v %v", matches, err)
	}
}

// Writable refuses a link into a read-only mount with the fix, before anything changes.
// Needs root and a private mount namespace (unshare), so it re-runs itself in one.
func TestWritableReadOnlyTarget(t *testing.T) {
	if os.Getenv("GPUPOLICY_HOSTFS_NS") != "1" {
		reexecInMountNamespace(t)
		return
	}
	root := hostTree(t, flatcar...)
	usr := filepath.Join(root, "/usr/share/containerd")
	if err := unix.Mount(usr, usr, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(usr, unix.MNT_DETACH) })
	if err := unix.Mount("", usr, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	err := Writable(root, "/etc/containerd/config.toml")
	want := "host path /etc/containerd/config.toml is a symbolic link to /usr/share/containerd/config.toml, and directory /usr/share/containerd cannot be written (read-only file system): gpupolicy writes through links to the file they name and keeps the link, so that file must be writable; replace the link with a copy of its target (cp --remove-destination /usr/share/containerd/config.toml /etc/containerd/config.toml: the node keeps its settings, and the copy no longer follows OS updates of the target), and retry"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	if _, err := (Writer{}).WriteFile(root, "/etc/containerd/config.toml", []byte("x"), 0o644); err == nil || !strings.Contains(err.Error(), "cp --remove-destination") {
		t.Fatalf("WriteFile through the read-only link: %v", err)
	}
	if err := Writable(root, "/etc/share/new.toml"); err == nil || !strings.Contains(err.Error(), "replace the symbolic link on the way with a directory") {
		t.Fatalf("directory link into the read-only mount: %v", err)
	}
	if err := Writable(root, "/etc/containerd/conf.d/99.toml"); err != nil {
		t.Fatalf("writable linked directory refused: %v", err)
	}
}

func reexecInMountNamespace(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a read-only bind mount needs root")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare not installed")
	}
	cmd := exec.Command("unshare", "-m", "--propagation", "private", os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "GPUPOLICY_HOSTFS_NS=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("in a private mount namespace: %v\n%s", err, out)
	}
}

// kernelResolve is the reference: the kernel's own resolution inside root (openat2 with
// RESOLVE_IN_ROOT, the chroot semantics), as a host path, or the kernel's error.
func kernelResolve(t testing.TB, rootFD int, realRoot, hostPath string, flags uint64) (string, error) {
	how := &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	if flags&unix.O_CREAT != 0 {
		how.Mode = 0o644
	}
	fd, err := unix.Openat2(rootFD, hostPath, how)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	local, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(realRoot, local)
	if err != nil || strings.HasPrefix(rel, "..") {
		t.Fatalf("the kernel left the root?! %s", local)
	}
	return filepath.Clean("/" + rel), nil
}

// FuzzResolve builds random trees of directories, files and links (absolute and relative,
// with ".." and trailing slashes) and checks Resolve against the kernel's own resolution in
// the root: same file, same failure, always inside the root.
// Run: go test ./plugin/agent/hostfs -run '^$' -fuzz FuzzResolve -fuzztime 2m
func FuzzResolve(f *testing.F) {
	f.Add([]byte{0, 0, 2, 1, 1, 2, 3, 0}, []byte{1, 2, 3})
	f.Add([]byte{3, 0, 0, 1, 0, 3, 0, 1, 1, 1}, []byte{0, 0, 1})
	f.Add([]byte{0, 0, 0, 0, 1, 1, 2, 5, 4, 1, 2, 3, 6, 4, 4, 4, 4, 0}, []byte{5, 1, 2, 0, 3})
	f.Fuzz(func(t *testing.T, tree, query []byte) {
		root := t.TempDir()
		realRoot, err := filepath.EvalSymlinks(root)
		if err != nil {
			t.Fatal(err)
		}
		buildTree(t, root, tree)
		rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(rootFD)
		if _, err := kernelResolve(t, rootFD, realRoot, "/", unix.O_PATH); errors.Is(err, unix.ENOSYS) {
			t.Skip("no openat2 (Linux < 5.6)")
		}
		for len(query) > 0 {
			var hostPath string
			hostPath, query = pathFrom(query, true)
			checkAgainstKernel(t, root, rootFD, realRoot, hostPath)
		}
	})
}

func checkAgainstKernel(t *testing.T, root string, rootFD int, realRoot, hostPath string) {
	p, err := Resolve(root, hostPath)
	if err == nil && (!filepath.IsAbs(p.Real) || filepath.Clean(p.Real) != p.Real || !strings.HasPrefix(p.Local(), root)) {
		t.Fatalf("%s resolved outside the root: %+v", hostPath, p)
	}
	want, kerr := kernelResolve(t, rootFD, realRoot, hostPath, unix.O_PATH)
	switch {
	case kerr == nil:
		if err != nil || p.Real != want {
			t.Fatalf("%s: Resolve %+v, %v; the kernel opens %s", hostPath, p, err, want)
		}
		if fi, err := os.Lstat(p.Local()); err != nil || fi.Mode()&fs.ModeSymlink != 0 {
			t.Fatalf("%s: resolved to a link or nothing: %v", hostPath, err)
		}
	case errors.Is(kerr, unix.ELOOP):
		if !errors.Is(err, ErrLinkLoop) {
			t.Fatalf("%s: the kernel finds a loop, Resolve %+v, %v", hostPath, p, err)
		}
	case errors.Is(kerr, unix.ENOTDIR):
		if !errors.Is(err, ErrNotDir) {
			t.Fatalf("%s: the kernel finds a file for a directory, Resolve %+v, %v", hostPath, p, err)
		}
	case errors.Is(kerr, unix.ENOENT):
		if errors.Is(err, ErrDanglingLink) || errors.Is(err, fs.ErrNotExist) {
			return
		}
		if err != nil {
			t.Fatalf("%s: the kernel finds nothing, Resolve: %v", hostPath, err)
		}
		if _, err := os.Lstat(p.Local()); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: the kernel finds nothing, Resolve finds %s", hostPath, p.Real)
		}
		// Where a create puts the file: the kernel's O_CREAT (which would also follow a
		// dangling link, the case Resolve refuses) agrees when the directory exists.
		created, cerr := kernelResolve(t, rootFD, realRoot, hostPath, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY)
		if cerr == nil {
			defer os.Remove(p.Local())
			if created != p.Real {
				t.Fatalf("%s: the kernel creates %s, Resolve says %s", hostPath, created, p.Real)
			}
		} else if _, err := os.Stat(filepath.Dir(p.Local())); err == nil && !errors.Is(cerr, unix.EISDIR) {
			t.Fatalf("%s: the kernel cannot create it (%v) though Resolve's directory exists", hostPath, cerr)
		}
	default:
		t.Fatalf("%s: kernel error %v", hostPath, kerr)
	}
}

var fuzzParts = []string{"a", "b", "c", "..", ".", "d"}

// pathFrom decodes a path from the front of b: a length, then one part per byte.
func pathFrom(b []byte, abs bool) (string, []byte) {
	n := int(b[0] % 5)
	b = b[1:]
	var parts []string
	for ; n > 0 && len(b) > 0; n-- {
		parts = append(parts, fuzzParts[int(b[0])%len(fuzzParts)])
		b = b[1:]
	}
	s := strings.Join(parts, "/")
	if abs {
		s = "/" + s
	}
	return s, b
}

// buildTree decodes entries (kind, then a path; links then a target) and creates what it can.
func buildTree(t *testing.T, root string, b []byte) {
	for i := 0; len(b) > 1 && i < 16; i++ {
		kind := b[0] % 5
		var path, target string
		path, b = pathFrom(b[1:], true)
		local := filepath.Join(root, path)
		if !creatable(root, local) {
			continue
		}
		switch kind {
		case 0:
			_ = os.MkdirAll(local, 0o755)
		case 1:
			_ = os.WriteFile(local, nil, 0o644)
		default:
			if len(b) == 0 {
				return
			}
			target, b = pathFrom(b, kind == 2)
			if kind == 4 && target != "" {
				target += "/"
			}
			if target == "" {
				target = "."
			}
			_ = os.Symlink(target, local)
		}
	}
}

// creatable reports whether local can be created without following a link: the tree's own
// links may point anywhere on this machine, and building it must not write there.
func creatable(root, local string) bool {
	rel, err := filepath.Rel(root, local)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return false
	}
	cur := root
	parts := strings.Split(rel, "/")
	for i, name := range parts {
		cur = filepath.Join(cur, name)
		fi, err := os.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			return true
		}
		if err != nil || i == len(parts)-1 || !fi.IsDir() {
			return false
		}
	}
	return false
}

// MkdirAll leaves an existing directory alone even when its parent is read-only: the toolkit
// DaemonSet mounts the host's / read-only at /host and /var/lib/gpupolicy writable over it, and
// the CDI step's MkdirAll of that directory must not need /var/lib to be writable (found by the
// real-node e2e suite). A missing directory under the read-only parent is still refused.
func TestMkdirAllExistingUnderReadOnlyParent(t *testing.T) {
	if os.Getenv("GPUPOLICY_HOSTFS_NS") != "1" {
		reexecInMountNamespace(t)
		return
	}
	root := t.TempDir()
	state := filepath.Join(root, "var/lib/gpupolicy")
	if err := os.MkdirAll(state, 0o755); err != nil {
		t.Fatal(err)
	}
	// The container's view: / read-only, the state directory a writable mount of its own.
	for _, m := range []struct {
		dir   string
		flags uintptr
	}{{root, unix.MS_RDONLY}, {state, 0}} {
		if err := unix.Mount(m.dir, m.dir, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(m.dir, unix.MNT_DETACH) })
		if err := unix.Mount("", m.dir, "", unix.MS_REMOUNT|unix.MS_BIND|m.flags, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := MkdirAll(root, "/var/lib/gpupolicy"); err != nil {
		t.Fatalf("existing writable mount under a read-only parent: %v", err)
	}
	if err := MkdirAll(root, "/var/lib/other"); err == nil || !strings.Contains(err.Error(), "read-only file system") {
		t.Fatalf("a new directory under the read-only parent: %v", err)
	}
}
