//go:build !linux

package cli

// exchangeDirs has no atomic exchange here: two renames.
func exchangeDirs(tmp, dir string) error { return swapByRename(tmp, dir) }
