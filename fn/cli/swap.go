package cli

import (
	"os"
	"path/filepath"
)

// swapByRename moves dir aside, tmp into place, and the old tree into tmp for removal.
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
