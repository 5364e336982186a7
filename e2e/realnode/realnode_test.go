package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpupolicy/gpupolicy/e2e/internal/realnode"
	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/nodefacts/hostfacts"
)

// nodeCase is one real node: its containerd and the device list strategy that goes with it
// (containerd 1.6 drops the CRI's CDI devices, so 1.6 gets envvar; 2.1 resolves CDI itself).
type nodeCase struct {
	containerd string
	strategy   string
	testdata   string // kustomization under testdata/
	broken     string // the same stack with a drop-in containerd refuses
}

var cases = []nodeCase{
	{containerd: "1.6", strategy: config.DeviceListEnvVar, testdata: "containerd-1.6", broken: "broken-drop-in-1.6"},
	{containerd: "2.1", strategy: config.DeviceListCDICRI, testdata: "containerd-2.1", broken: "broken-drop-in-2.1"},
}

const (
	poolLabel    = "gpupolicy.dev/pool"
	poolName     = "shared"
	replicas     = 2 // the pool's time-slicing replicas in testdata/*/gpupolicy.yaml
	mockGPUs     = 8 // the dgxa100 NVML mock
	workloadNS   = "realnode-workload"
	workloadName = "cuda-job"
)

// TestRealNode runs the rendered stack on one real node per containerd version, one after
// the other (the kubelet's device-plugin directory is fixed, and each node gets the machine).
func TestRealNode(t *testing.T) {
	images := buildImages(t)
	timing := newTimingFile(t)
	for _, c := range cases {
		t.Run("containerd-"+c.containerd, func(t *testing.T) { testRealNode(t, c, images, timing) })
	}
}

func testRealNode(t *testing.T, c nodeCase, images *imageSet, timing *timingFile) {
	ctx := context.Background()
	r := render(t, c.testdata)
	if got := r.agent.ContainerRuntime.RestartMode; got != "signal" {
		t.Fatalf("testdata %s: restartMode %q, the suite supervises containerd for signal", c.testdata, got)
	}
	if pool := findPool(r, poolName); pool == nil || pool.DevicePlugin.DeviceListStrategy != c.strategy || pool.DevicePlugin.Sharing.TimeSlicing.Replicas != replicas {
		t.Fatalf("testdata %s: want pool %s with deviceListStrategy %s and %d replicas, rendered %+v", c.testdata, poolName, c.strategy, replicas, pool)
	}
	t.Cleanup(func() { deleteStack(t, r) })
	apply(t, r)

	name := "gpu-" + strings.ReplaceAll(c.containerd, ".", "-")
	dir := filepath.Join(env.workDir, name)
	n, err := realnode.Start(ctx, realnode.Options{
		Name: name, Containerd: c.containerd, Containerd21Dir: env.containerd21,
		Kubelet: env.bins.Kubelet, Kubeconfig: env.cluster.Kubeconfig, APIServer: env.cluster.Server,
		Dir: dir, DriverVersion: r.agent.Driver.Version,
		Labels: map[string]string{config.LabelGPUPresent: "true", poolLabel: poolName},
		Images: images.tars(t, r.toolkitImage(t)),
	})
	if err != nil {
		t.Fatal(err)
	}
	s := &nodeState{t: t, n: n, r: r, c: c}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node %s failed; its logs are in %s\n%s\n%s", name, n.LogDir, n.Tail("containerd", 15), n.Tail("kubelet", 25))
		}
		deleteWorkload()
		deleteStack(t, r)
		if err := n.Stop(); err != nil {
			t.Errorf("tear down node %s: %v", name, err)
		}
		_ = env.cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})

	registered := s.waitRegistered()
	// The workload is submitted as soon as the node exists: what a user sees as the node's
	// bring-up is registration until a GPU pod runs on it.
	createWorkload(t, name)
	agent := s.waitStagePod("gpu-node-agent", 90*time.Second)
	agentCID := agent.Status.ContainerStatuses[0].ContainerID
	// Discovery runs here too, unprivileged, reading the host's /sys: Ready means it scanned the
	// bus and reached the API server (this machine has no NVIDIA GPU; the label is preset).
	s.waitStagePod("gpu-discovery", 90*time.Second)

	driver := s.waitStagePod("gpu-driver", 90*time.Second)
	s.waitLabel(config.LabelDeployToolkit, "true", 60*time.Second)
	tk := s.waitStagePod("gpu-container-toolkit", 2*time.Minute)
	s.waitLabel(config.LabelToolkitReady, "true", 60*time.Second)
	s.checkToolkit(agent.Name, agentCID)
	dp := s.waitStagePod("gpu-device-plugin-"+poolName, 90*time.Second)
	if p := stagePod(t, r.ns, "gpu-device-plugin", name); p != nil {
		t.Errorf("the device plugin DaemonSet for nodes outside the pools runs %s on the pool's node", p.Name)
	}
	gfd := s.waitStagePod("gpu-feature-discovery", 90*time.Second)
	exp := s.waitStagePod("gpu-exporter", 90*time.Second)
	s.checkOrder([]*corev1.Pod{agent, driver, tk, dp}, gfd, exp)
	s.checkGatesByAgent()

	s.waitAllocatable(mockGPUs * replicas)
	wl := s.waitWorkload()
	took := wl.Status.StartTime.Sub(registered)
	if cs := wl.Status.ContainerStatuses; len(cs) > 0 && cs[0].State.Running != nil {
		took = cs[0].State.Running.StartedAt.Sub(registered)
	}
	t.Logf("containerd %s: node registered → workload pod Running in %s", c.containerd, took.Round(time.Millisecond))
	timing.add(fmt.Sprintf("| containerd %s | node registered → workload Running | %s |", c.containerd, took.Round(100*time.Millisecond)))
	uuid := s.checkWorkloadDevice(wl)
	s.checkExporterAttributes(exp, uuid)
	s.recordFootprint(timing)

	worst := s.restartKubelet10(wl, uuid)
	timing.add(fmt.Sprintf("| containerd %s | kubelet restart → device plugin registered, worst of 10 | %s |", c.containerd, worst.Round(time.Millisecond)))
	s.restartContainerd(wl)
	s.brokenDropIn()
}

// nodeState is one node under test with the helpers its assertions share.
type nodeState struct {
	t *testing.T
	n *realnode.Node
	r *rendered
	c nodeCase
}

// diag is what a failed wait prints about the node: its labels, the stack's pods, the
// agent's and the kubelet's last lines.
func (s *nodeState) diag() string {
	var b strings.Builder
	if node, err := getNode(s.n.Name); err == nil {
		fmt.Fprintf(&b, "node %s labels: %s\n", s.n.Name, nvidiaLabels(node))
	}
	for _, ns := range []string{s.r.ns, workloadNS} {
		if pods, err := env.cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{}); err == nil {
			fmt.Fprintf(&b, "pods in %s:\n  %s\n", ns, podSummary(pods.Items))
		}
	}
	for _, ds := range []string{"gpu-node-agent", "gpu-container-toolkit"} {
		if p := stagePod(s.t, s.r.ns, ds, s.n.Name); p != nil {
			for _, c := range p.Spec.Containers {
				fmt.Fprintf(&b, "log of %s/%s:\n    %s\n", p.Name, c.Name, tail(podLog(s.n, p, c.Name), 12))
			}
		}
	}
	b.WriteString(s.n.Tail("kubelet", 15))
	return b.String()
}

func (s *nodeState) waitRegistered() time.Time {
	var created time.Time
	eventually(s.t, 90*time.Second, "node "+s.n.Name+" registered and Ready", s.diag, func() (bool, string) {
		node, err := getNode(s.n.Name)
		if err != nil {
			return false, err.Error()
		}
		created = node.CreationTimestamp.Time
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprintf("conditions %v", node.Status.Conditions)
	})
	// Nothing in this control plane removes the kubelet's not-ready taint once the node is
	// Ready (a cluster's node-lifecycle controller would).
	eventually(s.t, 30*time.Second, "not-ready taint removed", s.diag, func() (bool, string) {
		node, err := getNode(s.n.Name)
		if err != nil {
			return false, err.Error()
		}
		var keep []corev1.Taint
		for _, tn := range node.Spec.Taints {
			if tn.Key != corev1.TaintNodeNotReady {
				keep = append(keep, tn)
			}
		}
		if len(keep) == len(node.Spec.Taints) {
			return true, ""
		}
		node.Spec.Taints = keep
		_, err = env.cs.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{})
		return false, fmt.Sprint(err)
	})
	return created
}

// waitStagePod waits until the node's pod of DaemonSet ds is Running and Ready.
func (s *nodeState) waitStagePod(ds string, timeout time.Duration) *corev1.Pod {
	s.t.Helper()
	var pod *corev1.Pod
	eventually(s.t, timeout, ds+" pod Ready on "+s.n.Name, s.diag, func() (bool, string) {
		pod = stagePod(s.t, s.r.ns, ds, s.n.Name)
		if pod == nil {
			return false, "no pod"
		}
		return pod.Status.Phase == corev1.PodRunning && podReady(pod), podSummary([]corev1.Pod{*pod})
	})
	if img := pod.Spec.Containers[0].Image; img != images.gpupolicyRef {
		s.t.Errorf("%s runs %s, want the project's image %s", pod.Name, img, images.gpupolicyRef)
	}
	return pod
}

func (s *nodeState) waitLabel(key, value string, timeout time.Duration) {
	s.t.Helper()
	eventually(s.t, timeout, fmt.Sprintf("label %s=%s on %s", key, value, s.n.Name), s.diag, func() (bool, string) {
		node, err := getNode(s.n.Name)
		if err != nil {
			return false, err.Error()
		}
		return node.Labels[key] == value, nvidiaLabels(node)
	})
}

// checkOrder: each stage's pod was created after the one before it (its gate opened only
// once the earlier stage was verified); feature discovery and the exporter after the toolkit.
func (s *nodeState) checkOrder(chain []*corev1.Pod, after ...*corev1.Pod) {
	s.t.Helper()
	for i := 1; i < len(chain); i++ {
		if chain[i].CreationTimestamp.Before(&chain[i-1].CreationTimestamp) {
			s.t.Errorf("%s created at %s, before %s (%s): stages out of order", chain[i].Name, chain[i].CreationTimestamp, chain[i-1].Name, chain[i-1].CreationTimestamp)
		}
	}
	tk := chain[2]
	for _, p := range after {
		if p.CreationTimestamp.Before(&tk.CreationTimestamp) {
			s.t.Errorf("%s created before the toolkit pod %s", p.Name, tk.Name)
		}
	}
}

// checkGatesByAgent: the gate labels were written by the node agent (its field manager in
// the node's managedFields), through the guardrails, not by the test.
func (s *nodeState) checkGatesByAgent() {
	s.t.Helper()
	node, err := getNode(s.n.Name)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, l := range []string{config.LabelDeployDriver, config.LabelDeployToolkit, config.LabelToolkitReady, config.LabelDeployDevicePlugin} {
		owner := ""
		for _, mf := range node.ManagedFields {
			if mf.FieldsV1 != nil && strings.Contains(mf.FieldsV1.GetRawString(), `"f:`+l+`"`) {
				owner = mf.Manager
			}
		}
		if owner != "gpu-node-agent" {
			s.t.Errorf("label %s on %s is managed by %q, want the node agent (gpu-node-agent)", l, s.n.Name, owner)
		}
	}
}

// checkToolkit: the drop-in is installed in the real containerd's config, containerd was
// restarted by signal (a new PID in the supervisor's start log), the status file says the
// handler is verified, a pod that ran before the restart still runs in the same container,
// and the node's own settings survived the merge.
func (s *nodeState) checkToolkit(agentPod, agentCID string) {
	t := s.t
	t.Helper()
	starts, err := s.n.Starts("containerd")
	if err != nil {
		t.Fatal(err)
	}
	if len(starts) < 2 {
		t.Errorf("containerd started %d time(s); the toolkit stage (restartMode signal) should have restarted it once", len(starts))
	} else if starts[len(starts)-1].PID == starts[0].PID {
		t.Errorf("containerd restarted with the same PID %d", starts[0].PID)
	}
	st, err := hostfacts.ReadToolkitStatus(s.n.HostPath("/"))
	if err != nil {
		t.Fatalf("toolkit status file: %v", err)
	}
	if !st.Verified || !slices.Contains(st.Handlers, "nvidia") || st.DropInSHA256 != s.r.agent.Toolkit.DropInSHA256 {
		t.Errorf("toolkit status %+v: want handler nvidia verified for drop-in %s", st, s.r.agent.Toolkit.DropInSHA256)
	} else {
		t.Logf("containerd %s: toolkit status verified by %q", s.c.containerd, st.VerifiedBy)
	}
	if _, err := os.Stat(s.n.HostPath("/etc/containerd/conf.d/" + config.DropInFile)); err != nil {
		t.Errorf("drop-in not installed: %v", err)
	}
	dump, err := s.n.ConfigDump(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var lost []string
	for _, want := range s.nodeSettings() {
		if !strings.Contains(dump, want) {
			lost = append(lost, want)
		}
	}
	if len(lost) > 0 {
		t.Errorf("containerd config dump after the toolkit stage lacks %q (a node setting lost, or the handler not loaded):\n%s", lost, dump)
	}
	p, err := env.cs.CoreV1().Pods(s.r.ns).Get(context.Background(), agentPod, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the agent pod %s that ran before containerd's restart: %v", agentPod, err)
	}
	if cs := p.Status.ContainerStatuses; len(cs) != 1 || cs[0].ContainerID != agentCID || cs[0].RestartCount != 0 || cs[0].State.Running == nil {
		t.Errorf("agent pod %s after containerd's restart: %s; want container %s still running", agentPod, podSummary([]corev1.Pod{*p}), agentCID)
	}
}

// nodeSettings are lines of `containerd config dump` that show the node's own settings and
// the handler the drop-in adds.
func (s *nodeState) nodeSettings() []string {
	common := []string{
		`[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]`,
		`BinaryName = "` + s.r.agent.Toolkit.RuntimePath + `"`,
		`[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.` + realnode.DebugRuntime + `]`,
		`config_path = "` + realnode.RegistryConfigPath + `"`,
		`restrict_oom_score_adj = true`,
		`sandbox_image = "` + realnode.PauseImage + `"`,
		`conf_dir = "/etc/cni/net.d"`,
		`SystemdCgroup = false`,
	}
	if s.c.containerd == "1.6" {
		return common
	}
	// containerd 2.x dumps TOML with single-quoted strings.
	return []string{
		`[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]`,
		`BinaryName = '` + s.r.agent.Toolkit.RuntimePath + `'`,
		`[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.` + realnode.DebugRuntime + `]`,
		`config_path = '` + realnode.RegistryConfigPath + `'`,
		`restrict_oom_score_adj = true`,
		`sandbox = '` + realnode.PauseImage + `'`,
		`conf_dir = '/etc/cni/net.d'`,
		`enable_cdi = true`,
		`SystemdCgroup = false`,
	}
}

func (s *nodeState) waitAllocatable(want int) {
	s.t.Helper()
	eventually(s.t, 60*time.Second, fmt.Sprintf("allocatable nvidia.com/gpu = %d on %s", want, s.n.Name), s.diag, func() (bool, string) {
		node, err := getNode(s.n.Name)
		if err != nil {
			return false, err.Error()
		}
		q := node.Status.Allocatable["nvidia.com/gpu"]
		return q.Value() == int64(want), "allocatable " + q.String()
	})
}

func createWorkload(t *testing.T, node string) {
	t.Helper()
	ctx := context.Background()
	_, err := env.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: workloadNS}}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	rc := "nvidia"
	grace := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: workloadName, Namespace: workloadNS},
		Spec: corev1.PodSpec{
			RuntimeClassName:              &rc,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "job", Image: images.workloadRef,
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}},
			}},
		},
	}
	if _, err := env.cs.CoreV1().Pods(workloadNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func deleteWorkload() {
	ctx := context.Background()
	zero := int64(0)
	_ = env.cs.CoreV1().Pods(workloadNS).Delete(ctx, workloadName, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	for i := 0; i < 100; i++ {
		if _, err := env.cs.CoreV1().Pods(workloadNS).Get(ctx, workloadName, metav1.GetOptions{}); err != nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (s *nodeState) waitWorkload() *corev1.Pod {
	s.t.Helper()
	var pod *corev1.Pod
	eventually(s.t, 90*time.Second, "workload pod Running on "+s.n.Name, s.diag, func() (bool, string) {
		p, err := env.cs.CoreV1().Pods(workloadNS).Get(context.Background(), workloadName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pod = p
		return p.Status.Phase == corev1.PodRunning && podReady(p), podSummary([]corev1.Pod{*p})
	})
	return pod
}

func findPool(r *rendered, name string) *config.AgentPool {
	for i := range r.agent.NodePools {
		if r.agent.NodePools[i].Name == name {
			return &r.agent.NodePools[i]
		}
	}
	return nil
}
