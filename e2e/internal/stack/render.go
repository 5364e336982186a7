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
