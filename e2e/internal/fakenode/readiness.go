package fakenode

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// ValidatorContainer is the rendered driver validator's container (driver.source preinstalled).
const ValidatorContainer = "driver-validator"

// ReadinessRule turns a program's /readyz answer into the pod's Ready.
type ReadinessRule func(code int, body string) bool

// ProbeReadiness is the kubelet's rule for an HTTP readiness probe: 2xx and 3xx are Ready.
func ProbeReadiness(code int, _ string) bool { return code >= 200 && code < 400 }

// Readiness plays the kubelet's readiness probe for the driver validator pods of the fake
// nodes: for every such pod kwok runs (kwok must hold their readiness, see
// cluster.Options.UnreadyContainers), it runs the real `gpu-node-agent driver --watch` over
// the node's Host, probes its /readyz as the rendered probe does, and writes the answer into
// the pod's Ready condition with a status update, as the kubelet would.
type Readiness struct {
	f    *Fleet
	mu   sync.Mutex
	rule ReadinessRule
	pods map[string]*validatorProc // by pod UID
	wg   sync.WaitGroup
}

type validatorProc struct {
	cancel context.CancelFunc
}

// MirrorReadiness starts the validators' readiness mirror under rule until ctx ends.
func (f *Fleet) MirrorReadiness(ctx context.Context, rule ReadinessRule) (*Readiness, error) {
	r := &Readiness{f: f, rule: rule, pods: map[string]*validatorProc{}}
	factory := informers.NewSharedInformerFactoryWithOptions(f.cs, 0, informers.WithNamespace(f.agentDS.Namespace))
	inf := factory.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { r.podChanged(ctx, o) },
		UpdateFunc: func(_, o any) { r.podChanged(ctx, o) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				r.stop(string(p.UID))
			}
		},
	})
	if err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("pod informer for the readiness mirror did not sync")
	}
	go func() { <-ctx.Done(); r.Stop() }()
	return r, nil
}

// SetRule changes how /readyz answers map to Ready from now on.
func (r *Readiness) SetRule(rule ReadinessRule) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rule = rule
}

func (r *Readiness) currentRule() ReadinessRule {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rule
}

// Stop stops every validator.
func (r *Readiness) Stop() {
	r.mu.Lock()
	for uid, p := range r.pods {
		p.cancel()
		delete(r.pods, uid)
	}
	r.mu.Unlock()
	r.wg.Wait()
}

func (r *Readiness) stop(uid string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.pods[uid]; p != nil {
		p.cancel()
		delete(r.pods, uid)
	}
}

func hasContainer(p *corev1.Pod, name string) bool {
	for _, c := range p.Spec.Containers {
		if c.Name == name {
			return true
		}
	}
	return false
}

func (r *Readiness) podChanged(ctx context.Context, o any) {
	p, ok := o.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" || !hasContainer(p, ValidatorContainer) {
		return
	}
	if p.DeletionTimestamp != nil {
		r.stop(string(p.UID))
		return
	}
	if p.Status.Phase != corev1.PodRunning {
		return
	}
	r.f.mu.Lock()
	h := r.f.hosts[p.Spec.NodeName]
	r.f.mu.Unlock()
	if h == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pods[string(p.UID)] != nil {
		return
	}
	pctx, cancel := context.WithCancel(ctx)
	r.pods[string(p.UID)] = &validatorProc{cancel: cancel}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if err := r.runValidator(pctx, h, p.Namespace, p.Name); err != nil && pctx.Err() == nil {
			r.f.recordErr(h.Node, fmt.Errorf("driver validator: %w", err))
		}
	}()
}

// runValidator runs the validator container's command for h and mirrors its readiness into
// the pod until ctx ends.
func (r *Readiness) runValidator(ctx context.Context, h *Host, ns, pod string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	dir := filepath.Join(r.f.dir, "run", h.Node)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	logFile, err := os.OpenFile(filepath.Join(dir, "driver-validator.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(r.f.agentBin, "driver", "--config", r.f.agentCfgPath, "--host-root", h.Root,
		"--watch", "--interval", "1s", "--listen", addr)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	client := &http.Client{Timeout: 2 * time.Second}
	ready := false
	known := false
	// The rendered probe runs every 30 s; a second keeps the test short without changing
	// what the answer means.
	for tick := time.NewTicker(500 * time.Millisecond); ; {
		select {
		case <-ctx.Done():
			tick.Stop()
			return nil
		case <-tick.C:
		}
		code, body := 0, ""
		if resp, err := client.Get("http://" + addr + "/readyz"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			code, body = resp.StatusCode, string(b)
		}
		want := code != 0 && r.currentRule()(code, body)
		if known && want == ready {
			continue
		}
		if err := r.setReady(ctx, ns, pod, want); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			continue // the pod may be on its way out; the informer stops us then
		}
		ready, known = want, true
	}
}

// setReady writes the pod's Ready and ContainersReady conditions and its containers' ready
// flags, as the kubelet's status manager does after a probe result changed.
func (r *Readiness) setReady(ctx context.Context, ns, name string, ready bool) error {
	pods := r.f.cs.CoreV1().Pods(ns)
	p, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	now := metav1.Now()
	for _, t := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
		found := false
		for i := range p.Status.Conditions {
			c := &p.Status.Conditions[i]
			if c.Type == t {
				found = true
				if c.Status != status {
					c.Status, c.LastTransitionTime = status, now
				}
			}
		}
		if !found {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: status, LastTransitionTime: now})
		}
	}
	for i := range p.Status.ContainerStatuses {
		p.Status.ContainerStatuses[i].Ready = ready
	}
	_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
