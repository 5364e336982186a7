package stack

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	"github.com/fluxcd/pkg/ssa"
	"github.com/fluxcd/pkg/ssa/utils"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Applier applies stages with Flux's server-side-apply engine and waits for each with kstatus,
// as kustomize-controller does with `wait: true`. Every API warning is recorded: an object the
// server accepts "with a warning" is a finding, not a pass.
type Applier struct {
	manager  *ssa.ResourceManager
	warnings *WarningRecorder
	owner    string
	// Timeout for one stage to become ready after it was applied.
	Timeout time.Duration
}

// NewApplier builds an applier acting as fieldOwner (e.g. "argocd-controller",
// "kustomize-controller"). Field validation is Strict, so an unknown or duplicated field
// fails the apply instead of being dropped with a warning.
func NewApplier(cfg *rest.Config, fieldOwner string) (*Applier, error) {
	cfg = rest.CopyConfig(cfg)
	rec := &WarningRecorder{}
	cfg.WarningHandler = nil
	cfg.WarningHandlerWithContext = rec
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{HTTPClient: httpClient, Mapper: mapper})
	if err != nil {
		return nil, err
	}
	c = client.WithFieldValidation(c, metav1.FieldValidationStrict)
	poller := polling.NewStatusPoller(c, mapper, polling.Options{})
	m := ssa.NewResourceManager(c, poller, ssa.Owner{Field: fieldOwner, Group: "gpupolicy.dev"})
	return &Applier{manager: m, warnings: rec, owner: fieldOwner, Timeout: 2 * time.Minute}, nil
}

// Client is the controller-runtime client the applier uses.
func (a *Applier) Client() client.Client { return a.manager.Client() }

// Apply applies one stage (CRDs, namespaces and cluster roles first, as ApplyAllStaged does)
// and waits until kstatus reports every object Current. It fails on any API warning.
func (a *Applier) Apply(ctx context.Context, stage string, objs []*unstructured.Unstructured) (*ssa.ChangeSet, error) {
	before := a.warnings.Len()
	opts := ssa.DefaultApplyOptions()
	opts.WaitTimeout = a.Timeout
	opts.WaitInterval = 500 * time.Millisecond
	cs, err := a.manager.ApplyAllStaged(ctx, objs, opts)
	if err != nil {
		return cs, fmt.Errorf("stage %s: apply: %w", stage, err)
	}
	if w := a.warnings.Since(before); len(w) > 0 {
		return cs, fmt.Errorf("stage %s: the API server answered with warnings:\n  %s", stage, strings.Join(w, "\n  "))
	}
	err = a.manager.WaitForSetWithContext(ctx, cs.ToObjMetadataSet(), ssa.WaitOptions{
		Interval: 500 * time.Millisecond, Timeout: a.Timeout, FailFast: true,
	})
	if err != nil {
		return cs, fmt.Errorf("stage %s: wait for %s: %w", stage, utils.FmtUnstructuredList(objs), err)
	}
	return cs, nil
}

// DryRun server-side applies every object with dryRun=All (strict field validation, forced
// ownership): the API server runs its validation and admission, CEL compilation included, and
// persists nothing, so objects whose names another stack in the cluster already uses can be
// checked too. It fails on the first refusal or any API warning.
func (a *Applier) DryRun(ctx context.Context, objs []*unstructured.Unstructured) error {
	before := a.warnings.Len()
	for _, o := range objs {
		err := a.Client().Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()),
			client.FieldOwner(a.owner), client.ForceOwnership, client.DryRunAll)
		if err != nil {
			return fmt.Errorf("server-side apply (dry run) of %s: %w", utils.FmtUnstructured(o), err)
		}
	}
	if w := a.warnings.Since(before); len(w) > 0 {
		return fmt.Errorf("server-side apply (dry run): the API server answered with warnings:\n  %s", strings.Join(w, "\n  "))
	}
	return nil
}

// WarningRecorder collects API warnings (deprecations, unknown fields, policy warnings).
type WarningRecorder struct {
	mu   sync.Mutex
	msgs []string
}

// HandleWarningHeaderWithContext implements rest.WarningHandlerWithContext.
func (w *WarningRecorder) HandleWarningHeaderWithContext(_ context.Context, code int, _ string, text string) {
	if code != 299 || text == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

// Len is the number of warnings so far.
func (w *WarningRecorder) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.msgs)
}

// Since returns the warnings recorded after the first n.
func (w *WarningRecorder) Since(n int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs[n:]...)
}
