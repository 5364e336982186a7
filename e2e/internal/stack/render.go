// Package stack renders the project's examples with the real tools and applies them to a
// cluster the way the GitOps engines do: Argo CD by sync wave, Flux stage by stage along the
// dependsOn chain of its Kustomization objects, both through Flux's server-side-apply engine.
package stack

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/fluxcd/pkg/ssa/utils"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// SyncWaveAnnotation orders objects for Argo CD; objects without it are in wave 0.
const SyncWaveAnnotation = "argocd.argoproj.io/sync-wave"

// KustomizeBinary is the kustomize the suite runs: $KUSTOMIZE, else the copy `make tools`
// installs under the cache ($GPUPOLICY_CACHE or ~/.cache/gpupolicy)/tools/kustomize-v5.8.2.
func KustomizeBinary() (string, error) {
	if k := os.Getenv("KUSTOMIZE"); k != "" {
		return k, nil
	}
	cache := os.Getenv("GPUPOLICY_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		cache = filepath.Join(home, ".cache", "gpupolicy")
	}
	k := filepath.Join(cache, "tools", "kustomize-v5.8.2", "kustomize")
	if _, err := os.Stat(k); err != nil {
		return "", fmt.Errorf("kustomize not found at %s: run `make tools` or set KUSTOMIZE", k)
	}
	return k, nil
}

// Kustomize runs `kustomize build` on dir with exec functions enabled (the examples run
// bin/gpupolicy-fn as an exec KRM function) and parses the output.
func Kustomize(ctx context.Context, kustomize, dir string) ([]*unstructured.Unstructured, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, kustomize, "build", "--enable-alpha-plugins", "--enable-exec", dir)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w\n%s", dir, err, stderr.String())
	}
	objs, err := utils.ReadObjects(&stdout)
	if err != nil {
		return nil, fmt.Errorf("parse output of kustomize build %s: %w", dir, err)
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("kustomize build %s produced no objects", dir)
	}
	return objs, nil
}

// Wave is the set of objects Argo CD syncs together.
type Wave struct {
	Number  int
	Objects []*unstructured.Unstructured
}

// ByWave groups objects by their sync-wave annotation, lowest wave first, keeping the input
// order inside a wave.
func ByWave(objs []*unstructured.Unstructured) ([]Wave, error) {
	byNum := map[int][]*unstructured.Unstructured{}
	for _, o := range objs {
		n := 0
		if v, ok := o.GetAnnotations()[SyncWaveAnnotation]; ok {
			var err error
			if n, err = strconv.Atoi(v); err != nil {
				return nil, fmt.Errorf("%s: annotation %s=%q is not an integer", utils.FmtUnstructured(o), SyncWaveAnnotation, v)
			}
		}
		byNum[n] = append(byNum[n], o)
	}
	waves := make([]Wave, 0, len(byNum))
	for n, group := range byNum {
		waves = append(waves, Wave{Number: n, Objects: group})
	}
	sort.Slice(waves, func(i, j int) bool { return waves[i].Number < waves[j].Number })
	return waves, nil
}

// RenderPolicy runs `gpupolicy-fn render -f policy -o outDir` (the real function, fn the
// binary) and returns every object of the rendered tree.
func RenderPolicy(ctx context.Context, fn, policy, outDir string) ([]*unstructured.Unstructured, error) {
	if b, err := exec.CommandContext(ctx, fn, "render", "-f", policy, "-o", outDir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("gpupolicy-fn render -f %s: %w\n%s", policy, err, b)
	}
	var objs []*unstructured.Unstructured
	err := filepath.WalkDir(outDir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(p) != ".yaml" || filepath.Base(p) == "kustomization.yaml" {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		got, err := utils.ReadObjects(f)
		objs = append(objs, got...)
		return err
	})
	return objs, err
}

// DRAObjects picks, from a rendered stack, its Namespaces and what the DRA plugin needs to run
// outside its DaemonSet (as tests run it: a process per node): the DeviceClasses, the plugin's
// ServiceAccount and RBAC, and the ResourceSlice guardrails.
func DRAObjects(objs []*unstructured.Unstructured) (namespaces, dra []*unstructured.Unstructured) {
	for _, o := range objs {
		switch {
		case o.GetKind() == "Namespace":
			namespaces = append(namespaces, o)
		case o.GetKind() == "DaemonSet":
		case o.GetKind() == "DeviceClass", strings.Contains(o.GetName(), "gpu-dra-plugin"), strings.Contains(o.GetName(), "resourceslice-guardrails"):
			dra = append(dra, o)
		}
	}
	return namespaces, dra
}
