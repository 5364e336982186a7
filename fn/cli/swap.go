package cli

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// swapDir puts tmp at dir; tmp then holds the old tree, which the caller removes. A new dir is
// a plain rename; an existing one is exchanged (atomically where the platform can).
func swapDir(tmp, dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return os.Rename(tmp, dir)
	}
	return exchangeDirs(tmp, dir)
}

// swapByRename moves dir aside, tmp into place, and the old tree into tmp for removal:
// between the renames dir is briefly absent, never half written.
func swapByRename(tmp, dir string) error {
	old := filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+".old")
	if err := os.RemoveAll(old); err != nil {
		return err
	}
	if err := os.Rename(dir, old); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		_ = os.Rename(old, dir) // put the old tree back
		return err
	}
	return os.Rename(old, tmp)
}
