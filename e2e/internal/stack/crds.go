package stack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fluxcd/pkg/ssa/utils"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
)

// InstallMonitoringCRDs applies the Prometheus operator's ServiceMonitor and PrometheusRule CRDs
// (the *.yaml files under dir, e2e/testdata/crds), as a cluster's monitoring stack would before
// the GPU stack, so the rendered monitoring objects are applied against their real schemas
// rather than skipped.
func InstallMonitoringCRDs(ctx context.Context, cfg *rest.Config, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs under %s (%v)", dir, err)
	}
	var crds []*unstructured.Unstructured
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			return err
		}
		objs, err := utils.ReadObjects(r)
		r.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		crds = append(crds, objs...)
	}
	a, err := NewApplier(cfg, "monitoring-stack")
	if err != nil {
		return err
	}
	_, err = a.Apply(ctx, "monitoring CRDs", crds)
	return err
}
