// Command argo-sync syncs a directory of manifests into a cluster with Argo CD's own sync engine
// (github.com/argoproj/gitops-engine pkg/sync): resources are applied wave by wave in
// argocd.argoproj.io/sync-wave order, and the next wave starts only once every resource of the
// previous one is healthy by gitops-engine's health checks (pkg/health), exactly as Argo CD's
// application controller drives it: a fresh sync context per iteration over the live state of the
// cluster cache, carrying the operation state forward. Unlike Argo CD, it also waits for the last
// wave to be healthy, so "synced" means every wave completed. It prints one line per wave event
// and exits non-zero when the sync fails or does not complete within --timeout.
//
// It lives in its own module (gitops-engine v0.7.3 pins k8s.io v0.23) and is built and cached by
// e2e/hack/build-gitops.sh; the gpupolicy e2e tests run it against their control plane.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/argoproj/gitops-engine/pkg/cache"
	"github.com/argoproj/gitops-engine/pkg/health"
	"github.com/argoproj/gitops-engine/pkg/sync"
	"github.com/argoproj/gitops-engine/pkg/sync/common"
	"github.com/argoproj/gitops-engine/pkg/utils/kube"
	"github.com/argoproj/gitops-engine/pkg/utils/tracing"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/klogr"
)

// appAnnotation marks the objects this program manages, like Argo CD's tracking annotation.
const appAnnotation = "argo-sync.gpupolicy.dev/app"

func main() {
	klog.InitFlags(nil)
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster to sync into")
	dir := flag.String("dir", "", "directory of YAML manifests (read recursively); required")
	app := flag.String("app", "gpupolicy", "application name recorded on every managed object")
	namespace := flag.String("namespace", "default", "namespace for namespaced objects that name none")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up (exit 2) when the sync has not completed by then")
	interval := flag.Duration("interval", time.Second, "how often the operation is re-evaluated")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: argo-sync --dir DIR [flags]\n\n%s\n\nflags:\n", strings.SplitN(usage, "\n", 2)[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "argo-sync: --dir is required")
		os.Exit(64)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *kubeconfig, *dir, *app, *namespace, *interval); err != nil {
		fmt.Fprintf(os.Stderr, "argo-sync: %v\n", err)
		if ctx.Err() != nil {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

const usage = "Syncs a directory of manifests with Argo CD's sync engine, wave by wave, waiting for health."

func run(ctx context.Context, kubeconfig, dir, app, namespace string, interval time.Duration) error {
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %q: %w", kubeconfig, err)
	}
	config.QPS, config.Burst = 50, 100
	targets, err := readManifests(dir, app)
	if err != nil {
		return err
	}
	log := klogr.New()
	clusterCache := cache.NewClusterCache(config,
		cache.SetLogr(log),
		cache.SetPopulateResourceInfoHandler(func(un *unstructured.Unstructured, _ bool) (interface{}, bool) {
			mark := un.GetAnnotations()[appAnnotation]
			return mark, mark != ""
		}))
	if err := clusterCache.EnsureSynced(); err != nil {
		return fmt.Errorf("cluster cache: %w", err)
	}
	defer clusterCache.Invalidate()
	kubectl := &kube.KubectlCmd{Log: log, Tracer: tracing.NopTracer{}}
	isManaged := func(r *cache.Resource) bool { mark, _ := r.Info.(string); return mark == app }

	start := time.Now()
	fmt.Printf("argo-sync: %d objects in %d waves from %s\n", len(targets), len(waves(targets)), dir)
	var (
		phase     common.OperationPhase
		message   string
		results   []common.ResourceSyncResult
		startedAt = metav1.NewTime(start)
		lastMsg   string
	)
	for {
		managed, err := clusterCache.GetManagedLiveObjs(targets, isManaged)
		if err != nil {
			return fmt.Errorf("live state: %w", err)
		}
		recon := sync.Reconcile(targets, managed, namespace, clusterCache)
		opts := []sync.SyncOpt{
			sync.WithLogr(log),
			sync.WithSyncWaveHook(func(p common.SyncPhase, wave int, final bool) error {
				fmt.Printf("argo-sync: %6.1fs applied wave %d (%s)\n", time.Since(start).Seconds(), wave, p)
				return nil
			}),
		}
		if phase != "" {
			opts = append(opts, sync.WithInitialState(phase, message, results, startedAt))
		}
		syncCtx, cleanup, err := sync.NewSyncContext("local", recon, config, config, kubectl, namespace, clusterCache.GetOpenAPISchema(), opts...)
		if err != nil {
			return fmt.Errorf("sync context: %w", err)
		}
		syncCtx.Sync()
		phase, message, results = syncCtx.GetState()
		cleanup()
		if message != lastMsg {
			fmt.Printf("argo-sync: %6.1fs %s: %s\n", time.Since(start).Seconds(), phase, message)
			lastMsg = message
		}
		if phase.Completed() {
			if !phase.Successful() {
				for _, r := range results {
					if r.Status != common.ResultCodeSynced || r.HookPhase == common.OperationFailed {
						fmt.Printf("argo-sync:   %s: %s %s\n", r.ResourceKey, r.Status, r.Message)
					}
				}
				return fmt.Errorf("sync %s: %s", phase, message)
			}
			break
		}
		if err := sleep(ctx, interval); err != nil {
			return fmt.Errorf("timed out in phase %s: %s", phase, message)
		}
	}
	// gitops-engine counts the last wave as done once applied; the fleet's question is whether it
	// became healthy too, judged by the same health checks.
	for {
		managed, err := clusterCache.GetManagedLiveObjs(targets, isManaged)
		if err != nil {
			return fmt.Errorf("live state: %w", err)
		}
		unhealthy := unhealthyObjects(managed)
		if len(unhealthy) == 0 {
			fmt.Printf("argo-sync: %6.1fs every wave healthy\n", time.Since(start).Seconds())
			return nil
		}
		if msg := "waiting for healthy state of " + strings.Join(unhealthy, ", "); msg != lastMsg {
			fmt.Printf("argo-sync: %6.1fs %s\n", time.Since(start).Seconds(), msg)
			lastMsg = msg
		}
		if err := sleep(ctx, interval); err != nil {
			return fmt.Errorf("timed out: not healthy: %s", strings.Join(unhealthy, ", "))
		}
	}
}

func unhealthyObjects(live map[kube.ResourceKey]*unstructured.Unstructured) []string {
	var out []string
	for key, obj := range live {
		if obj == nil {
			out = append(out, key.String()+" (missing)")
			continue
		}
		h, err := health.GetResourceHealth(obj, nil)
		if err != nil {
			out = append(out, fmt.Sprintf("%s (%v)", key, err))
		} else if h != nil && h.Status != health.HealthStatusHealthy {
			out = append(out, fmt.Sprintf("%s (%s: %s)", key, h.Status, h.Message))
		}
	}
	sort.Strings(out)
	return out
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// readManifests reads every .yaml/.yml/.json file under dir and marks each object as managed.
func readManifests(dir, app string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		switch strings.ToLower(filepath.Ext(path)) {
		case ".yaml", ".yml", ".json":
		default:
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		items, err := kube.SplitYAML(data)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		for _, obj := range items {
			ann := obj.GetAnnotations()
			if ann == nil {
				ann = map[string]string{}
			}
			ann[appAnnotation] = app
			obj.SetAnnotations(ann)
		}
		out = append(out, items...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("manifests in %s: %w", dir, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no manifests in %s", dir)
	}
	return out, nil
}

func waves(objs []*unstructured.Unstructured) map[int]bool {
	w := map[int]bool{}
	for _, o := range objs {
		n, _ := strconv.Atoi(o.GetAnnotations()[common.AnnotationSyncWave])
		w[n] = true
	}
	return w
}
