package gitops

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// ArgoSyncResult is one argo-sync run: its progress lines (one per wave event) and how long
// the sync took.
type ArgoSyncResult struct {
	Lines []string
	Took  time.Duration
}

// ArgoSync writes objs into dir as one manifest file and syncs them with argo-sync (Argo CD's
// sync engine: waves in order, each waited for by gitops-engine's health checks, the last one
// too) against kubeconfig; it fails when the sync fails or does not complete within timeout.
func ArgoSync(ctx context.Context, bin, kubeconfig, dir string, objs []*unstructured.Unstructured, timeout time.Duration) (ArgoSyncResult, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return ArgoSyncResult{}, err
	}
	var buf bytes.Buffer
	for _, o := range objs {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			return ArgoSyncResult{}, err
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifests.yaml"), buf.Bytes(), 0o644); err != nil {
		return ArgoSyncResult{}, err
	}
	start := time.Now()
	var out, logs bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "--kubeconfig", kubeconfig, "--dir", dir, "--timeout", timeout.String(), "--v", "0")
	cmd.Stdout, cmd.Stderr = &out, &logs
	err := cmd.Run()
	_ = os.WriteFile(filepath.Join(dir, "argo-sync.log"), logs.Bytes(), 0o644)
	res := ArgoSyncResult{Lines: strings.Split(strings.TrimSpace(out.String()), "\n"), Took: time.Since(start)}
	if err != nil {
		return res, fmt.Errorf("argo-sync: %v; output:\n%s\n(engine log: %s)", err, out.String(), filepath.Join(dir, "argo-sync.log"))
	}
	return res, nil
}
