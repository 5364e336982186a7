package kubelettest

import (
	"os"
	"testing"
)

// ShortDir is a temporary directory with a short path, removed when the test ends: unix socket
// paths must stay under 108 bytes, which t.TempDir's long names can exceed.
func ShortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// StartTest is Start for a test: it fails the test on error and stops the kubelet when the
// test ends.
func StartTest(t testing.TB, dir string) *Kubelet {
	t.Helper()
	k, err := Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	return k
}
