// Package peer finds the real programs that tests run against (kustomize, yq, ajv, containerd
// 2.x): the Makefile installs each into the cache, keyed by version, and exports its path. A
// peer that is missing skips the test on a developer's machine that never ran `make tools`, and
// fails it in CI (CI set), where the peer is part of the environment.
package peer

import (
	"os"
	"path/filepath"
	"testing"
)

// Missing skips t with msg, or fails it in CI.
func Missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Cache is the directory the Makefile caches peers in: $GPUPOLICY_CACHE, or
// ~/.cache/gpupolicy (the Makefile's CACHE).
func Cache(t testing.TB) string {
	t.Helper()
	if dir := os.Getenv("GPUPOLICY_CACHE"); dir != "" {
		return dir
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(home, ".cache", "gpupolicy")
}

// Tool returns the path of a tool `make tools` installs: $env when set, else
// <cache>/tools/<name>-<version>/<bin>. When nothing is there, Missing says how to get it.
func Tool(t testing.TB, env, name, version, bin string) string {
	t.Helper()
	path := os.Getenv(env)
	if path == "" {
		path = filepath.Join(Cache(t), "tools", name+"-"+version, bin)
	}
	if _, err := os.Stat(path); err != nil {
		Missing(t, name+" "+version+" not found at "+path+": run `make tools` (or set "+env+")")
	}
	return path
}

// Bin returns the path of a program the Makefile builds into the cache: $env when set, else
// rel under Cache. When nothing is there, Missing says hint.
func Bin(t testing.TB, env, rel, hint string) string {
	t.Helper()
	path := os.Getenv(env)
	if path == "" {
		path = filepath.Join(Cache(t), rel)
	}
	if _, err := os.Stat(path); err != nil {
		Missing(t, hint+" ("+err.Error()+")")
	}
	return path
}
