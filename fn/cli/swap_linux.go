package cli

import (
	"errors"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// swapDir puts tmp at dir in one atomic step (renameat2 RENAME_EXCHANGE); tmp then holds the
// old tree, which the caller removes. A new dir is a plain rename.
func swapDir(tmp, dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return os.Rename(tmp, dir)
	}
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
		return swapByRename(tmp, dir) // file systems without RENAME_EXCHANGE
	}
	return err
}
