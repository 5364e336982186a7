// Package hostfs writes host files the crash-safe way: a temporary file in the same
// directory, fsync, rename over the target, fsync of the directory. A reader (containerd at
// start-up) therefore sees either the old or the new bytes, never a torn file, even when the
// writer is SIGKILLed or the node loses power in between.
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

// Join places an absolute host path under root ("/host" in the DaemonSets, "/" on the host).
func Join(root, hostPath string) string {
	if root == "" {
		root = "/"
	}
	return filepath.Join(root, filepath.Clean("/"+hostPath))
}

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

// WriteFile atomically replaces path with data (mode perm) unless it already holds exactly
// data. It reports whether it wrote.
func (w Writer) WriteFile(path string, data []byte, perm fs.FileMode) (bool, error) {
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, data) {
		return false, nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
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

// Remove deletes path (absent is fine) and syncs its directory. It reports whether it removed.
func (w Writer) Remove(path string) (bool, error) {
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("remove %s: %w", path, err)
	}
	w.step("remove")
	return true, SyncDir(filepath.Dir(path))
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

// CleanTemps removes temporary files a killed writer left in dir.
func CleanTemps(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), TempMarker) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}
