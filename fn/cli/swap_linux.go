package cli

import (
	"errors"

	"golang.org/x/sys/unix"
)

// exchangeDirs swaps two existing paths in one atomic step (renameat2 RENAME_EXCHANGE).
func exchangeDirs(tmp, dir string) error {
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
		return swapByRename(tmp, dir) // file systems without RENAME_EXCHANGE
	}
	return err
}
