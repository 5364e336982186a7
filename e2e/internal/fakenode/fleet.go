package fakenode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// NodeNameExtra is the user-info extra key a bound service-account token carries on a node;
// the guardrail policies compare it with the Node being written.
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// Fleet runs the node agent for every fake GPU node whose agent pod kwok reports Running, as
// the agent container would: the real `gpu-node-agent gate` (real stage checks over the
// node's Host, the real Reconciler) with the agent's service-account identity and node-name
// claim, so every patch it makes passes the guardrail policies or shows up in Errors.
//
// The agents run as processes, not in the test binary: the suite links Flux's engine, whose
// dependencies pull in Go's plugin package, which makes the linker bind every symbol at start
// (BIND_NOW); go-nvml's symbols are only resolved when libnvidia-ml is opened, so a test
// binary linking the agent would not start on a machine without NVIDIA's library.
type Fleet struct {
	admin        *rest.Config
	agentBin     string
	agentCfg     *config.Agent
	agentCfgPath string // the rendered config.yaml, as the ConfigMap mounts it
	agentDS      *appsv1.DaemonSet
	// toolkitDS and devicePluginDS name the DaemonSets gated by the toolkit and the device
	// plugin stage.
	toolkitDS, devicePluginDS map[string]bool
	cs                        kubernetes.Interface
	dir                       string
	// interval is the agents' --interval for agents started from now on (SetInterval); 0
	// passes none, so they run with the rendered config's, on their watches.
	interval time.Duration

	mu      sync.Mutex
	hosts   map[string]*Host
	running map[string]*agentProc
	// installed records the toolkit pods (by UID) whose install was already played, so an
	// update of the same pod does not undo a test's SetToolkit(false).
	installed map[string]bool
	errs      map[string][]error // by node
	wg        sync.WaitGroup
	// discoveryDS is the gpu-discovery DaemonSet whose running pods run the real
	// `gpu-node-agent discover` over their node's Host (EnableDiscovery); nil: none.
	discoveryDS *appsv1.DaemonSet
	discovering map[string]context.CancelFunc // by pod UID
	// upgrades, when set (EnableUpgrades), runs each node's upgrade step and plays the
	// driver container pods.
	upgrades *upgradeState
}

// EnableDiscovery makes every running pod of ds (the rendered gpu-discovery DaemonSet) run the
// real `gpu-node-agent discover` over its node's Host with ds's service-account identity and
// the node-name claim, as the pod would. Call it before Start.
func (f *Fleet) EnableDiscovery(ds *appsv1.DaemonSet) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.discoveryDS = ds
	f.discovering = map[string]context.CancelFunc{}
}

// discoveryPodChanged starts or stops node's discover process with its pod.
func (f *Fleet) discoveryPodChanged(ctx context.Context, p *corev1.Pod, running bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	uid := string(p.UID)
	if !running {
		if cancel := f.discovering[uid]; cancel != nil {
			cancel()
			delete(f.discovering, uid)
		}
		return
	}
	h := f.hosts[p.Spec.NodeName]
	if h == nil || f.discovering[uid] != nil {
		return
	}
	dctx, cancel := context.WithCancel(ctx)
	f.discovering[uid] = cancel
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		f.runProgram(dctx, h, "discover", f.discoveryDS.Spec.Template.Spec.ServiceAccountName,
			"discover", "--host-root", h.Root, "--node", h.Node, "--interval", "1s", "--listen", "")
	}()
}

// NewFleet prepares agents (agentBin: bin/gpu-node-agent) for the rendered agent DaemonSet and
// its configuration document (the config.yaml key of the gpu-node-agent ConfigMap);
// stageDaemonSets maps gate labels to the DaemonSets they gate: running toolkit pods play
// `toolkit install`, running device-plugin pods make their node advertise GPUs. Host
// directories, kubeconfigs and the agents' logs live under dir.
func NewFleet(admin *rest.Config, agentBin string, agentDS *appsv1.DaemonSet, stageDaemonSets map[string][]*appsv1.DaemonSet, agentConfigYAML []byte, dir string) (*Fleet, error) {
	var cfg config.Agent
	if err := yaml.UnmarshalStrict(agentConfigYAML, &cfg); err != nil {
		return nil, fmt.Errorf("agent config from ConfigMap %s: %w", config.AgentConfigMap, err)
	}
	if agentDS.Spec.Template.Spec.ServiceAccountName == "" {
		return nil, fmt.Errorf("DaemonSet %s/%s sets no serviceAccountName; the agent needs its own identity", agentDS.Namespace, agentDS.Name)
	}
	if _, err := os.Stat(agentBin); err != nil {
		return nil, fmt.Errorf("node agent binary: %w (run `make build`)", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, config.AgentConfigFile)
	if err := os.WriteFile(cfgPath, agentConfigYAML, 0o644); err != nil {
		return nil, err
	}
	names := func(gate string) map[string]bool {
		m := map[string]bool{}
		for _, ds := range stageDaemonSets[gate] {
			m[ds.Name] = true
		}
		return m
	}
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return nil, err
	}
	return &Fleet{
		admin: admin, agentBin: agentBin, agentCfg: &cfg, agentCfgPath: cfgPath, agentDS: agentDS,
		toolkitDS: names(config.LabelDeployToolkit), devicePluginDS: names(config.LabelDeployDevicePlugin), cs: cs,
		dir: dir, interval: time.Second,
		hosts: map[string]*Host{}, running: map[string]*agentProc{}, installed: map[string]bool{},
		errs: map[string][]error{},
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
	h := &Host{Node: node, Root: root, cfg: f.agentCfg, InstallsToolkit: installsToolkit}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hosts[node] = h
	return h, nil
}

// RemoveHost stops the node's agent and forgets its host, before the node is deleted (an
// agent left running would report the missing node as an error).
func (f *Fleet) RemoveHost(node string) {
	<-f.stopAgent(node)
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.hosts, node)
}

// Start watches the pods of the stack's namespace: it runs or stops each node's agent with its
// agent pod, plays `toolkit install` when a toolkit pod runs, and the kubelet's device manager
// when a device-plugin pod comes or goes.
func (f *Fleet) Start(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(f.cs, 0, informers.WithNamespace(f.agentDS.Namespace))
	inf := factory.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { f.podChanged(ctx, o) },
		UpdateFunc: func(_, o any) { f.podChanged(ctx, o) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				if f.upgrades != nil && isDriverPod(p) {
					f.driverPodChanged(p, true)
					return
				}
				switch owner := ownerDaemonSet(p); {
				case f.discoveryDS != nil && owner == f.discoveryDS.Name:
					f.discoveryPodChanged(ctx, p, false)
				case owner == f.agentDS.Name:
					f.stopAgent(p.Spec.NodeName)
				case f.devicePluginDS[owner]:
					f.devicePluginChanged(ctx, p, false)
				}
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
	if f.upgrades != nil && isDriverPod(p) {
		f.driverPodChanged(p, false)
		return
	}
	owner := ownerDaemonSet(p)
	switch {
	case f.discoveryDS != nil && owner == f.discoveryDS.Name:
		f.discoveryPodChanged(ctx, p, p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning)
	case owner == f.agentDS.Name && p.DeletionTimestamp != nil:
		f.stopAgent(p.Spec.NodeName)
	case f.devicePluginDS[owner] && p.DeletionTimestamp != nil:
		f.devicePluginChanged(ctx, p, false)
	case p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning:
	case f.devicePluginDS[owner]:
		f.devicePluginChanged(ctx, p, true)
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
		f.recordErr(h.Node, fmt.Errorf("toolkit install: %w", err))
	}
}

// SetInterval sets the --interval of the agents started from now on; 0 gives them none, so
// they re-validate at the rendered config's interval and react to events in between, as on
// a real node. NewFleet starts with 1s, which tests that change a host by hand rely on.
func (f *Fleet) SetInterval(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.interval = d
}

func (f *Fleet) startAgent(ctx context.Context, node string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.hosts[node]
	if !ok || f.running[h.Node] != nil {
		return
	}
	actx, cancel := context.WithCancel(ctx)
	p := &agentProc{cancel: cancel, done: make(chan struct{})}
	f.running[h.Node] = p
	f.wg.Add(1)
	interval := f.interval
	go func() {
		defer f.wg.Done()
		defer close(p.done)
		f.runAgent(actx, h, interval)
	}()
}

type agentProc struct {
	cancel context.CancelFunc
	done   chan struct{} // closed once the process exited and its log was scanned
}

// stopAgent stops node's agent; the returned channel is closed once it is gone.
func (f *Fleet) stopAgent(node string) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.running[node]
	if p == nil {
		done := make(chan struct{})
		close(done)
		return done
	}
	p.cancel()
	delete(f.running, node)
	return p.done
}

// runAgent is the agent container: the real `gpu-node-agent gate` with the rendered config,
// the node's host directory as --host-root and a kubeconfig that carries the agent's identity.
// It runs until ctx ends (the pod went away or the fleet stops), then gets SIGTERM.
func (f *Fleet) runAgent(ctx context.Context, h *Host, interval time.Duration) {
	args := []string{"gate", "--config", f.agentCfgPath, "--host-root", h.Root, "--node", h.Node}
	if interval > 0 {
		args = append(args, "--interval", interval.String())
	}
	if f.upgrades != nil {
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			f.superviseUpgrade(ctx, h)
		}()
	}
	f.runProgram(ctx, h, "agent", f.agentDS.Spec.Template.Spec.ServiceAccountName, args...)
}

// runProgram runs `gpu-node-agent ARGS --kubeconfig K` for node h as serviceAccount (with the
// node-name claim), logging to run/<node>/<name>.log, until ctx ends; then it scans the log.
func (f *Fleet) runProgram(ctx context.Context, h *Host, name, serviceAccount string, args ...string) {
	dir := filepath.Join(f.dir, "run", h.Node) // LiveProblems reads agent.log here
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.recordErr(h.Node, err)
		return
	}
	kubeconfig := filepath.Join(dir, name+".kubeconfig")
	if err := WriteKubeconfig(kubeconfig, AgentConfig(f.admin, f.agentDS.Namespace, serviceAccount, h.Node)); err != nil {
		f.recordErr(h.Node, err)
		return
	}
	logPath := filepath.Join(dir, name+".log")
	// Appended: a node whose pod is replaced runs a second process into the same log.
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		f.recordErr(h.Node, err)
		return
	}
	defer logFile.Close()
	cmd := exec.Command(f.agentBin, append(args, "--kubeconfig", kubeconfig)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.recordErr(h.Node, err)
		return
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		f.recordErr(h.Node, fmt.Errorf("%s exited on its own (%v); log: %s", name, err, logPath))
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	f.scanLog(h.Node, logPath)
}

// scanLog records every warning or error the agent logged (a reconcile that failed, e.g. a
// patch the guardrails denied; an event it could not post): the agent must work within its
// own RBAC and admission policies.
func (f *Fleet) scanLog(node, path string) {
	errs, err := agentLogProblems(path)
	if err != nil {
		errs = append(errs, err)
	}
	for _, e := range errs {
		f.recordErr(node, e)
	}
}

// LiveProblems reads the log of node's running agent now, so a test waiting for a gate can
// fail at once with the agent's reason (e.g. a patch the guardrails denied) instead of
// timing out.
func (f *Fleet) LiveProblems(node string) []error {
	errs, _ := agentLogProblems(filepath.Join(f.dir, "run", node, "agent.log"))
	return errs
}

// agentLogProblems returns the warnings and errors of an agent's JSON log.
func agentLogProblems(path string) ([]error, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, line := range strings.Split(string(b), "\n") {
		var rec struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
			Error string `json:"error"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if (rec.Level == "WARN" || rec.Level == "ERROR") && !strings.Contains(rec.Error, context.Canceled.Error()) {
			errs = append(errs, fmt.Errorf("%s: %s: %s (log: %s)", rec.Level, rec.Msg, rec.Error, path))
		}
	}
	return errs, nil
}

// recordErr keeps each distinct problem once: an agent retrying a denied patch every second
// logs the same line many times.
func (f *Fleet) recordErr(node string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.errs[node] {
		if e.Error() == err.Error() {
			return
		}
	}
	f.errs[node] = append(f.errs[node], err)
}

// Errors returns the problems of node's agent (all nodes for "") seen so far; an agent's log
// is read when it stops (RemoveHost, Stop, or its pod went away).
func (f *Fleet) Errors(node string) []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if node != "" {
		return append([]error(nil), f.errs[node]...)
	}
	var all []error
	for _, errs := range f.errs {
		all = append(all, errs...)
	}
	return all
}

// Stop stops every agent and waits for them.
func (f *Fleet) Stop() {
	f.mu.Lock()
	for n, p := range f.running {
		p.cancel()
		delete(f.running, n)
	}
	for uid, cancel := range f.discovering {
		cancel()
		delete(f.discovering, uid)
	}
	f.mu.Unlock()
	f.wg.Wait()
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

// WriteKubeconfig writes cfg (server, CA, token and impersonation) as a kubeconfig file, the
// form the agent binary takes with --kubeconfig.
func WriteKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["e2e"] = &clientcmdapi.AuthInfo{
		Token:                cfg.BearerToken,
		Impersonate:          cfg.Impersonate.UserName,
		ImpersonateGroups:    cfg.Impersonate.Groups,
		ImpersonateUserExtra: cfg.Impersonate.Extra,
	}
	kc.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "e2e"}
	kc.CurrentContext = "e2e"
	return clientcmd.WriteToFile(*kc, path)
}

// SetAgentConfig replaces the agents' configuration as the kubelet updates a ConfigMap volume:
// a new file renamed over the old one, which every running agent watches and reloads.
func (f *Fleet) SetAgentConfig(agentConfigYAML []byte) error {
	var cfg config.Agent
	if err := yaml.UnmarshalStrict(agentConfigYAML, &cfg); err != nil {
		return fmt.Errorf("agent config: %w", err)
	}
	tmp := f.agentCfgPath + ".new"
	if err := os.WriteFile(tmp, agentConfigYAML, 0o644); err != nil {
		return err
	}
	f.mu.Lock()
	*f.agentCfg = cfg // the hosts share it
	f.mu.Unlock()
	return os.Rename(tmp, f.agentCfgPath)
}
