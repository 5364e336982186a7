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

// The cached peers the Makefile builds, each named once: the version in the path is the
// Makefile's default (CONTAINERD2_VERSION, NVIDIA_CTK_VERSION, GFD_VERSION), and the variable
// is what the Makefile exports when it is overridden.

// Containerd2 is containerd 2.1.9 (`make containerd2`, e2e/hack/build-containerd.sh).
func Containerd2(t testing.TB) string {
	t.Helper()
	return Bin(t, "GPUPOLICY_CONTAINERD2_BIN", "node-bin/containerd-v2.1.9/containerd",
		"containerd 2.1.9 is not built: run `make containerd2` (e2e/hack/build-containerd.sh), or set GPUPOLICY_CONTAINERD2_BIN")
}

// NVIDIACtk is NVIDIA's nvidia-ctk of nvidia-container-toolkit v1.20.2 (`make nvidia-ctk`).
func NVIDIACtk(t testing.TB) string {
	t.Helper()
	return Bin(t, "GPUPOLICY_NVIDIA_CTK_BIN", "peers/nvidia-ctk-v1.20.2/nvidia-ctk",
		"nvidia-ctk v1.20.2 is not built: run `make nvidia-ctk`, or set GPUPOLICY_NVIDIA_CTK_BIN")
}

// ToolkitPeers is the directory of NVIDIA's toolkit programs v1.20.2 (`make toolkit-peers`,
// hack/peers/toolkit): nvidia-ctk-installer, the runtime, its hook, nvidia-cdi-hook and
// toolkit-config (NVIDIA's config loader).
func ToolkitPeers(t testing.TB) string {
	t.Helper()
	return Bin(t, "GPUPOLICY_TOOLKIT_PEERS", "peers/nvidia-toolkit-v1.20.2",
		"NVIDIA's toolkit programs are not built: run `make toolkit-peers` (hack/peers/toolkit/build.sh), or set GPUPOLICY_TOOLKIT_PEERS to their directory")
}

// Helm is helm v4.3.2 (`make helm`), which renders the gpu-operator chart for the import test.
func Helm(t testing.TB) string {
	t.Helper()
	return Bin(t, "GPUPOLICY_HELM_BIN", "peers/helm-v4.3.2/helm",
		"helm v4.3.2 is not built: run `make helm`, or set GPUPOLICY_HELM_BIN")
}

// GFDLabels is gpu-feature-discovery v0.17.4's own labelers over the NVML mock (`make
// gfd-labels`, hack/peers/gfd-labels).
func GFDLabels(t testing.TB) string {
	t.Helper()
	return Bin(t, "GPUPOLICY_GFD_LABELS_BIN", "peers/gfd-v0.17.4/gfd-labels",
		"gpu-feature-discovery's labelers are not built: run `make gfd-labels` (hack/peers/gfd-labels/build.sh), or set GPUPOLICY_GFD_LABELS_BIN")
}

// DPAllocate is k8s-device-plugin's own device plugin servers answering Allocate over the NVML
// mock, built beside gfd-labels (hack/peers/gfd-labels/build.sh).
func DPAllocate(t testing.TB) string {
	t.Helper()
	return Bin(t, "GPUPOLICY_DP_ALLOCATE_BIN", "peers/gfd-v0.17.4/dp-allocate",
		"k8s-device-plugin's device plugin is not built: run `make gfd-labels` (hack/peers/gfd-labels/build.sh), or set GPUPOLICY_DP_ALLOCATE_BIN")
}
