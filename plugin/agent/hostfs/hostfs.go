// Package hostfs is how the node agent reads and writes the host's files from a container
// where the host's / is mounted at a root ("/host"): every host path is resolved inside that
// root the way the host's kernel would resolve it (Resolve), so a symbolic link on the node
// leads to the node's file, never out of the root; and every write is crash-safe: a temporary
// file beside the file written, fsync, rename over it, fsync of the directory. A reader
// (containerd at start-up) therefore sees either the old or the new bytes, never a torn file,
// even when the writer is SIGKILLed or the node loses power in between.
package hostfs

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// TempMarker is part of every temporary file name. It never ends in ".toml", so a glob
// import such as conf.d/*.toml cannot pick up a half-written file.
const TempMarker = ".gpupolicy-tmp-"

// Writer performs atomic writes. Step, when set, is called between the individual system
// calls of a write (tests use it to SIGKILL the process at every point).
type Writer struct {
	Step func(point string)
}

func (w Writer) step(point string) {
	if w.Step != nil {
		w.Step(point)
	}
}

// WriteFile atomically replaces the host file hostPath (resolved inside root) with data
// (mode perm) unless it already holds exactly data; it reports whether it wrote. When the path
// is a symbolic link, the file the link names is replaced (the temporary file goes beside that
// file) and the link stays as it was: for the node's own files (containerd's config.toml and
// what it imports); the files gpupolicy owns go through WriteOwned, which refuses a link. A
// directory that cannot be written is refused before
// anything is created (Writable).
func (w Writer) WriteFile(root, hostPath string, data []byte, perm fs.FileMode) (bool, error) {
	p, err := Resolve(root, hostPath)
	if err != nil {
		return false, err
	}
	if cur, err := os.ReadFile(p.Local()); err == nil && bytes.Equal(cur, data) {
		return false, nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("read %s: %w", p, err)
	}
	if err := writable(p); err != nil {
		return false, err
	}
	wrote, err := w.writeLocal(p.Local(), data, perm)
	if err != nil && p.Linked() {
		err = fmt.Errorf("%s: %w", p, err)
	}
	return wrote, err
}

func (w Writer) writeLocal(path string, data []byte, perm fs.FileMode) (bool, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("create directory %s: %w", dir, err)
	}
	w.step("mkdir")
	suffix := make([]byte, 6)
	if _, err := rand.Read(suffix); err != nil {
		return false, err
	}
	tmp := filepath.Join(dir, "."+filepath.Base(path)+TempMarker+hex.EncodeToString(suffix))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return false, fmt.Errorf("create %s: %w", tmp, err)
	}
	w.step("create-temp")
	cleanup := func(err error) (bool, error) {
		_ = f.Close()
		_ = os.Remove(tmp)
		return false, err
	}
	half := len(data) / 2
	if _, err := f.Write(data[:half]); err != nil {
		return cleanup(fmt.Errorf("write %s: %w", tmp, err))
	}
	w.step("write-half")
	if _, err := f.Write(data[half:]); err != nil {
		return cleanup(fmt.Errorf("write %s: %w", tmp, err))
	}
	w.step("write")
	if err := f.Chmod(perm); err != nil { // umask may have narrowed the create mode
		return cleanup(fmt.Errorf("chmod %s: %w", tmp, err))
	}
	if err := f.Sync(); err != nil {
		return cleanup(fmt.Errorf("fsync %s: %w", tmp, err))
	}
	w.step("fsync")
	if err := f.Close(); err != nil {
		return cleanup(fmt.Errorf("close %s: %w", tmp, err))
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return false, fmt.Errorf("rename %s over %s: %w", tmp, path, err)
	}
	w.step("rename")
	if err := SyncDir(dir); err != nil {
		return true, err
	}
	w.step("fsync-dir")
	return true, nil
}

// Remove deletes the host file hostPath (absent is fine) and syncs its directory; it reports
// whether it removed. Like unlink(2), it follows links in the directories on the way but not a
// link at hostPath itself: the link goes, the file it names stays.
func (w Writer) Remove(root, hostPath string) (bool, error) {
	path, err := entry(root, hostPath)
	if err != nil {
		return false, err
	}
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("remove %s: %w", hostPath, err)
	}
	w.step("remove")
	return true, SyncDir(filepath.Dir(path))
}

// entry is the local name of hostPath's directory entry: its directory resolved, its last
// component not.
func entry(root, hostPath string) (string, error) {
	host := strings.TrimRight(hostPath, "/")
	dirPath, base := "/", host
	if i := strings.LastIndex(host, "/"); i >= 0 {
		dirPath, base = host[:i], host[i+1:]
	}
	if dirPath == "" {
		dirPath = "/"
	}
	if base == "" || base == "." || base == ".." {
		return "", &PathError{Root: root, Path: hostPath, Err: errors.New("names a directory, not a file")}
	}
	dir, err := Resolve(root, dirPath)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir.Local(), base), nil
}

// SyncDir fsyncs a directory so a rename or unlink in it survives a power loss.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// CleanTemps removes temporary files a killed writer left in the host directory hostDir.
func CleanTemps(root, hostDir string) error {
	p, err := Resolve(root, hostDir)
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(p.Local())
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), TempMarker) {
			if err := os.Remove(filepath.Join(p.Local(), e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}
