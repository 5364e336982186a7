package gitops

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/gpupolicy/gpupolicy/e2e/internal/cluster"
)

// ArgoNamespace is where the ApplicationSet controller, its ApplicationSets, the Applications
// and the cluster Secrets live.
const ArgoNamespace = "argocd"

// StartApplicationSetController runs Argo CD's ApplicationSet controller against the control
// plane with progressive syncs on, in ArgoNamespace, its probe, metrics and webhook servers on
// loopback; it returns once its metrics endpoint answers. No repo server is needed by the
// cluster generator.
func StartApplicationSetController(ctx context.Context, bin, kubeconfig, logDir string) (*cluster.Server, error) {
	var ports [3]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	addr := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	cmd := exec.Command(bin, "--kubeconfig", kubeconfig, "--namespace", ArgoNamespace,
		"--enable-progressive-syncs", "--enable-scm-providers=false", "--logformat=text", "--loglevel=info",
		"--probe-addr="+addr(ports[0]), "--metrics-addr="+addr(ports[1]), "--webhook-addr="+addr(ports[2]),
		"--argocd-repo-server=127.0.0.1:1")
	// Part of the controller (controller-runtime's config loader) reads $KUBECONFIG, not the flag.
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	// It registers no health checks (its probe server answers 404): the metrics endpoint
	// answers once the manager runs.
	return cluster.Serve(ctx, "argocd-applicationset-controller", cmd, filepath.Join(logDir, "applicationset-controller.log"),
		"http://"+addr(ports[1])+"/metrics", time.Minute)
}

// AppSync is one sync the stand-in ran: when it started and when the Application became
// Healthy (zero while it has not, or if the sync failed).
type AppSync struct {
	App              string
	Started, Healthy time.Time
	Failures         int // attempts that failed before the last
	Err              error
}

// RetryBackoff is the stand-in's pause between a failed sync attempt and the next.
var RetryBackoff = 5 * time.Second

// AppControllerStandIn plays the part of Argo CD's application controller for the Applications
// of ArgoNamespace, which the test cannot run (it needs the repo server, Redis and the
// destination clusters): it answers refresh requests with a new reconciledAt, reports every
// Application OutOfSync until it was synced, and runs each sync operation the ApplicationSet
// controller sets through sync (for the canary, Argo's own sync engine on the rendered objects,
// waves and health included), reporting Running/Progressing while it runs, retrying a failed
// attempt as the operation's retry limit says (Degraded in between), and
// Succeeded/Synced/Healthy when an attempt returns without error.
type AppControllerStandIn struct {
	dyn  dynamic.ResourceInterface
	sync func(ctx context.Context, app string) error

	mu      sync.Mutex
	syncs   []AppSync
	running map[string]bool
}

// RunAppControllerStandIn starts the stand-in until ctx ends.
func RunAppControllerStandIn(ctx context.Context, dyn dynamic.Interface, sync func(ctx context.Context, app string) error) *AppControllerStandIn {
	s := &AppControllerStandIn{dyn: dyn.Resource(ApplicationGVR).Namespace(ArgoNamespace), sync: sync, running: map[string]bool{}}
	go func() {
		for ctx.Err() == nil {
			s.pass(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
	return s
}

// Syncs returns the syncs so far, in the order they started.
func (s *AppControllerStandIn) Syncs() []AppSync {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]AppSync(nil), s.syncs...)
}

func (s *AppControllerStandIn) pass(ctx context.Context) {
	list, err := s.dyn.List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for i := range list.Items {
		app := &list.Items[i]
		name := app.GetName()
		s.mu.Lock()
		busy := s.running[name]
		s.mu.Unlock()
		if busy {
			continue
		}
		op, hasOp, _ := unstructured.NestedMap(app.Object, "operation")
		_, refresh := app.GetAnnotations()["argocd.argoproj.io/refresh"]
		reconciled, _, _ := unstructured.NestedString(app.Object, "status", "reconciledAt")
		switch {
		case hasOp:
			s.start(ctx, name, op)
		case refresh || reconciled == "":
			syncStatus, _, _ := unstructured.NestedString(app.Object, "status", "sync", "status")
			status := map[string]any{"reconciledAt": now()}
			if syncStatus == "" {
				status["sync"] = map[string]any{"status": "OutOfSync"}
				status["health"] = map[string]any{"status": "Missing"}
			}
			_ = s.patch(ctx, name, map[string]any{
				"metadata": map[string]any{"annotations": map[string]any{"argocd.argoproj.io/refresh": nil}},
				"status":   status,
			})
		}
	}
}

// start takes the operation: once the clock has moved past the second in which the
// ApplicationSet controller asked (its times have second precision and it looks for a start
// after that), the operation moves into status.operationState and the sync runs.
func (s *AppControllerStandIn) start(ctx context.Context, name string, op map[string]any) {
	s.mu.Lock()
	s.running[name] = true
	i := len(s.syncs)
	s.syncs = append(s.syncs, AppSync{App: name})
	s.mu.Unlock()
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 50*time.Millisecond)))
	started := time.Now()
	// Argo CD keeps the operation on the Application while it runs and removes it at the end.
	err := s.patch(ctx, name, map[string]any{
		"status": map[string]any{
			"operationState": map[string]any{"operation": op, "phase": "Running", "startedAt": now()},
			"health":         map[string]any{"status": "Progressing"},
			"reconciledAt":   now(),
		},
	})
	s.mu.Lock()
	s.syncs[i].Started = started
	s.mu.Unlock()
	go func() {
		// Retried as the operation's retry says (Argo CD's default limit 5), health Degraded
		// between the attempts.
		limit, _, _ := unstructured.NestedInt64(op, "retry", "limit")
		for attempt := int64(0); err == nil; attempt++ {
			if err = s.sync(ctx, name); err == nil || attempt >= limit {
				break
			}
			s.mu.Lock()
			s.syncs[i].Failures++
			s.mu.Unlock()
			_ = s.patch(ctx, name, map[string]any{"status": map[string]any{
				"operationState": map[string]any{"operation": op, "phase": "Running", "startedAt": started.UTC().Format(time.RFC3339),
					"message": fmt.Sprintf("%v; retrying attempt #%d", err, attempt+1), "retryCount": attempt + 1},
				"health": map[string]any{"status": "Degraded"},
			}})
			err = nil
			time.Sleep(RetryBackoff)
		}
		phase, health, syncStatus := "Succeeded", "Healthy", "Synced"
		if err != nil {
			phase, health, syncStatus = "Failed", "Degraded", "OutOfSync"
		}
		perr := s.patch(ctx, name, map[string]any{"operation": nil, "status": map[string]any{
			"operationState": map[string]any{"operation": op, "phase": phase, "startedAt": started.UTC().Format(time.RFC3339), "finishedAt": now()},
			"health":         map[string]any{"status": health},
			"sync":           map[string]any{"status": syncStatus},
			"reconciledAt":   now(),
		}})
		s.mu.Lock()
		defer s.mu.Unlock()
		if err == nil && perr == nil {
			s.syncs[i].Healthy = time.Now()
		}
		if err == nil {
			err = perr
		}
		s.syncs[i].Err = err
		delete(s.running, name)
	}()
}

func (s *AppControllerStandIn) patch(ctx context.Context, name string, patch map[string]any) error {
	b, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	if _, err := s.dyn.Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patching Application %s: %w", name, err)
	}
	return nil
}

func now() string { return time.Now().UTC().Format(time.RFC3339) }
