package fakenode

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/plugin/agent/gate"
	"github.com/gpupolicy/gpupolicy/plugin/agent/stages"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// NodeNameExtra is the user-info extra key a bound service-account token carries on a node;
// the guardrail policies compare it with the Node being written.
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// Fleet runs the node agent's gate for every fake GPU node whose agent pod kwok reports
// Running, as the agent container would: the real stage checks (package stages) over the
// node's Host, the real Reconciler, and the agent's service-account identity with the
// node-name claim, so every patch passes the guardrail policies or fails the test.
type Fleet struct {
	admin    *rest.Config
	agentCfg *config.Agent
	agentDS  *appsv1.DaemonSet
	dir      string
	log      *slog.Logger
	logFile  *os.File
	// Interval between reconciles when nothing kicks the agent (label changes by others).
	Interval time.Duration

	mu      sync.Mutex
	hosts   map[string]*Host
	kicks   map[string]chan struct{}
	running map[string]context.CancelFunc
	// installed records the toolkit pods (by UID) whose install was already played, so an
	// update of the same pod does not undo a test's SetToolkit(false).
	installed map[string]bool
	errs      []error
	wg        sync.WaitGroup
}

// NewFleet prepares agents for the rendered agent DaemonSet and its configuration document
// (the config.yaml key of the gpu-node-agent ConfigMap); toolkitDS are the DaemonSets of the
// toolkit stage, whose running pods play `toolkit install`. Host directories and the agents'
// log live under dir.
func NewFleet(admin *rest.Config, agentDS *appsv1.DaemonSet, toolkitDS []*appsv1.DaemonSet, agentConfigYAML []byte, dir string) (*Fleet, error) {
	var cfg config.Agent
	if err := yaml.UnmarshalStrict(agentConfigYAML, &cfg); err != nil {
		return nil, fmt.Errorf("agent config from ConfigMap %s: %w", config.AgentConfigMap, err)
	}
	if agentDS.Spec.Template.Spec.ServiceAccountName == "" {
		return nil, fmt.Errorf("DaemonSet %s/%s sets no serviceAccountName; the agent needs its own identity", agentDS.Namespace, agentDS.Name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	lf, err := os.Create(filepath.Join(dir, "agents.log"))
	if err != nil {
		return nil, err
	}
	tk := map[string]bool{}
	for _, ds := range toolkitDS {
		tk[ds.Name] = true
	}
	return &Fleet{
		admin: admin, agentCfg: &cfg, agentDS: agentDS, toolkitDS: tk, dir: dir, installed: map[string]bool{},
		log: slog.New(slog.NewTextHandler(lf, nil)), logFile: lf,
		Interval: 2 * time.Second,
		hosts:    map[string]*Host{}, kicks: map[string]chan struct{}{}, running: map[string]context.CancelFunc{},
	}, nil
}

// Config is the agent configuration the fleet runs with.
func (f *Fleet) Config() *config.Agent { return f.agentCfg }

// AddHost gives a GPU node a host filesystem with nothing installed: no driver loaded, no
// toolkit status. Its agent starts once kwok runs the node's agent pod. With installsToolkit
// the node's toolkit pod installs the toolkit when it runs; without, the test decides.
func (f *Fleet) AddHost(node string, installsToolkit bool) (*Host, error) {
	root := filepath.Join(f.dir, "hosts", node)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	kick := make(chan struct{}, 1)
	h := &Host{Node: node, Root: root, cfg: f.agentCfg, InstallsToolkit: installsToolkit, kick: func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hosts[node], f.kicks[node] = h, kick
	return h, nil
}

// RemoveHost stops the node's agent and forgets its host, before the node is deleted (an
// agent left running would report the missing node as an error).
func (f *Fleet) RemoveHost(node string) {
	f.stopAgent(node)
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.hosts, node)
	delete(f.kicks, node)
}

// Start watches the pods of the stack's namespace: it runs or stops each node's agent with its
// agent pod, and plays `toolkit install` when a toolkit pod runs.
func (f *Fleet) Start(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(f.admin)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(f.agentDS.Namespace))
	inf := factory.Core().V1().Pods().Informer()
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { f.podChanged(ctx, o) },
		UpdateFunc: func(_, o any) { f.podChanged(ctx, o) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if p, ok := o.(*corev1.Pod); ok && ownerDaemonSet(p) == f.agentDS.Name {
				f.stopAgent(p.Spec.NodeName)
			}
		},
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("pod informer for DaemonSet %s did not sync", f.agentDS.Name)
	}
	return nil
}

func ownerDaemonSet(p *corev1.Pod) string {
	if ref := metav1.GetControllerOf(p); ref != nil && ref.Kind == "DaemonSet" {
		return ref.Name
	}
	return ""
}

func (f *Fleet) podChanged(ctx context.Context, o any) {
	p, ok := o.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return
	}
	owner := ownerDaemonSet(p)
	switch {
	case owner == f.agentDS.Name && p.DeletionTimestamp != nil:
		f.stopAgent(p.Spec.NodeName)
	case p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning:
	case owner == f.agentDS.Name:
		f.startAgent(ctx, p.Spec.NodeName)
	case f.toolkitDS[owner]:
		f.toolkitPodRunning(p)
	}
}

// toolkitPodRunning plays the toolkit container: `toolkit install` writes the drop-in,
// restarts containerd, verifies the handler and records the status file the gate reads.
func (f *Fleet) toolkitPodRunning(p *corev1.Pod) {
	f.mu.Lock()
	h := f.hosts[p.Spec.NodeName]
	first := !f.installed[string(p.UID)]
	f.installed[string(p.UID)] = true
	f.mu.Unlock()
	if h == nil || !first || !h.InstallsToolkit {
		return
	}
	if err := h.SetToolkit(true); err != nil {
		f.recordErr(fmt.Errorf("toolkit install on %s: %w", h.Node, err))
	}
}

func (f *Fleet) startAgent(ctx context.Context, node string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.hosts[node]
	if !ok || f.running[h.Node] != nil {
		return
	}
	actx, cancel := context.WithCancel(ctx)
	f.running[h.Node] = cancel
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		f.runAgent(actx, h, f.kicks[h.Node])
	}()
}

func (f *Fleet) stopAgent(node string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cancel := f.running[node]; cancel != nil {
		cancel()
		delete(f.running, node)
	}
}

// runAgent is the agent container's main loop: reconcile now, then whenever the host changes
// or the interval passes. Errors are kept for Errors: a patch the guardrails deny is a defect.
func (f *Fleet) runAgent(ctx context.Context, h *Host, kick <-chan struct{}) {
	log := f.log.With("node", h.Node, "stage", "gate")
	client, err := kubernetes.NewForConfig(AgentConfig(f.admin, f.agentDS.Namespace, f.agentDS.Spec.Template.Spec.ServiceAccountName, h.Node))
	if err != nil {
		f.recordErr(fmt.Errorf("agent on %s: %w", h.Node, err))
		return
	}
	r := &gate.Reconciler{Client: client, Node: h.Node, Checks: stages.Checks(f.agentCfg, h.Root), Logger: f.log}
	log.Info("agent started")
	for {
		if _, err := r.Reconcile(ctx); err != nil && ctx.Err() == nil {
			log.Error("reconcile failed", "error", err)
			f.recordErr(fmt.Errorf("agent on %s: %w", h.Node, err))
		}
		select {
		case <-ctx.Done():
			log.Info("agent stopped")
			return
		case <-kick:
		case <-time.After(f.Interval):
		}
	}
}

func (f *Fleet) recordErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, err)
}

// Errors returns the reconcile errors so far.
func (f *Fleet) Errors() []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]error(nil), f.errs...)
}

// Stop stops every agent and waits for them.
func (f *Fleet) Stop() {
	f.mu.Lock()
	for n, cancel := range f.running {
		cancel()
		delete(f.running, n)
	}
	f.mu.Unlock()
	f.wg.Wait()
	f.logFile.Close()
}

// AgentConfig is admin impersonating the agent of node: its service account (with the
// groups a service-account token carries) and the node-name claim a token bound to a pod on
// that node carries.
func AgentConfig(admin *rest.Config, namespace, serviceAccount, node string) *rest.Config {
	c := rest.CopyConfig(admin)
	c.Impersonate = rest.ImpersonationConfig{
		UserName: fmt.Sprintf("system:serviceaccount:%s:%s", namespace, serviceAccount),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
		Extra:    map[string][]string{NodeNameExtra: {node}},
	}
	return c
}
