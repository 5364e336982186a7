package hostfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// ReadFile reads the host file hostPath, resolved inside root. A file that does not exist is
// an error that wraps fs.ErrNotExist; a dangling link or a loop on the way is a *PathError.
func ReadFile(root, hostPath string) ([]byte, error) {
	p, err := Resolve(root, hostPath)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p.Local())
	if errors.Is(err, syscall.EISDIR) {
		return nil, fmt.Errorf("host path %s is a directory, not a file: point the setting at the file itself, or move the directory away, and retry: %w", p, ErrIsDir)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, unwrapPath(err))
	}
	return b, nil
}

// Stat describes the host file hostPath, resolved inside root (the file a link names).
func Stat(root, hostPath string) (fs.FileInfo, error) {
	p, err := Resolve(root, hostPath)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(p.Local())
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", p, unwrapPath(err))
	}
	return fi, nil
}

// MkdirAll creates the host directory hostDir, resolved inside root, with its parents. A
// directory that already exists is left alone: it is often a writable mount under a
// read-only host root (the toolkit DaemonSet's /host/var/lib/gpupolicy), whose parent must not
// need to be writable.
func MkdirAll(root, hostDir string) error {
	p, err := Resolve(root, hostDir)
	if err != nil {
		return err
	}
	if fi, err := os.Stat(p.Local()); err == nil && fi.IsDir() {
		return nil
	}
	if err := writable(p); err != nil {
		return err
	}
	if err := os.MkdirAll(p.Local(), 0o755); err != nil {
		return fmt.Errorf("create directory %s: %w", p, unwrapPath(err))
	}
	return nil
}

// unwrapPath drops the *fs.PathError around a system call's error: it names the local path
// (under the root), where messages name the host path.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Glob returns the host paths matching the host path pattern (filepath.Match syntax), each
// directory on the way resolved inside root, sorted: the names matched, not the files links
// lead to, as filepath.Glob gives them on the host. As there, a dangling link matches (reading
// it then says what is wrong) and only a malformed pattern is an error.
func Glob(root, pattern string) ([]string, error) {
	if _, err := filepath.Match(pattern, ""); err != nil {
		return nil, err
	}
	matches := []string{"/"}
	for _, c := range split(filepath.Clean("/"+pattern), -1) {
		var next []string
		for _, m := range matches {
			if !hasMeta(c.name) {
				if entryExists(root, filepath.Join(m, c.name)) {
					next = append(next, filepath.Join(m, c.name))
				}
				continue
			}
			// A directory that is not one, is gone or cannot be resolved matches nothing, as
			// in filepath.Glob; reading a match reports its problem.
			dir, err := Resolve(root, m)
			if err != nil {
				continue
			}
			entries, err := os.ReadDir(dir.Local())
			if err != nil {
				continue
			}
			for _, e := range entries {
				if ok, _ := filepath.Match(c.name, e.Name()); ok {
					next = append(next, filepath.Join(m, e.Name()))
				}
			}
		}
		matches = next
	}
	sort.Strings(matches)
	return matches, nil
}

// entryExists reports whether hostPath names a directory entry (a dangling link counts).
func entryExists(root, hostPath string) bool {
	local, err := entry(root, hostPath)
	if err != nil {
		return false
	}
	_, err = os.Lstat(local)
	return err == nil
}

func hasMeta(s string) bool { return strings.ContainsAny(s, `*?[\`) }

// Owned refuses (a *PathError wrapping ErrOwnedLink that names the link, its target and the
// fix) when hostPath itself is a symbolic link. The files gpupolicy creates on a node (its
// drop-in, status file, CDI spec, backups and scratch files) are its own: unlike the node's
// config.toml and what it imports, which WriteFile keeps writing through their links, a link at
// one of these names was put there by someone else and could aim the write at any file. Links
// in the directories on the way are followed as Resolve does.
func Owned(root, hostPath string) error {
	local, err := entry(root, hostPath)
	if err != nil {
		return err
	}
	fi, err := os.Lstat(local)
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		return nil // absent, or not a link: WriteFile reports what else is wrong
	}
	target, err := os.Readlink(local)
	if err != nil {
		return &PathError{Root: root, Path: hostPath, Err: unwrapPath(err)}
	}
	if root == "" {
		root = "/"
	}
	return &PathError{Root: root, Path: hostPath, Link: hostPath, Target: target, Err: ErrOwnedLink}
}

// WriteOwned is WriteFile for a file gpupolicy owns: a symbolic link at hostPath is refused
// (Owned) before anything is written.
func (w Writer) WriteOwned(root, hostPath string, data []byte, perm fs.FileMode) (bool, error) {
	if err := Owned(root, hostPath); err != nil {
		return false, err
	}
	return w.WriteFile(root, hostPath, data, perm)
}

// Writable checks, without changing anything, that the host file hostPath can be created or
// replaced the way WriteFile does it: its directory (or the nearest one that exists, which
// WriteFile would create the rest in) is writable. A read-only file system or mount is named
// with the fix; for a symbolic link whose target is read-only (Flatcar ships
// /etc/containerd/config.toml as a link into the read-only /usr), the fix is to replace the
// link with a copy of its target.
func Writable(root, hostPath string) error {
	p, err := Resolve(root, hostPath)
	if err != nil {
		return err
	}
	return writable(p)
}

func writable(p Path) error {
	dir := filepath.Dir(p.Real)
	for dir != "/" {
		if _, err := os.Stat(filepath.Join(p.Root, dir)); err == nil {
			break
		}
		dir = filepath.Dir(dir)
	}
	const wOK = 2 // W_OK: access(2) reports a read-only mount (EROFS) even for root
	err := syscall.Access(filepath.Join(p.Root, dir), wOK)
	if err == nil {
		return nil
	}
	if !p.Linked() {
		return fmt.Errorf("host path %s cannot be written: directory %s: %w (mount it writable into the container)", p.Host, dir, err)
	}
	fix := "replace the symbolic link on the way with a directory of its own"
	if parent, perr := Resolve(p.Root, filepath.Dir(p.Host)); perr == nil && !parent.Linked() {
		// The file itself is the link.
		fix = fmt.Sprintf("replace the link with a copy of its target (cp --remove-destination %s %s: the node keeps its settings, and the copy no longer follows OS updates of the target)", p.Real, p.Host)
	}
	return fmt.Errorf("host path %s is a symbolic link to %s, and directory %s cannot be written (%v): gpupolicy writes through links to the file they name and keeps the link, so that file must be writable; %s, and retry", p.Host, p.Real, dir, err, fix)
}
