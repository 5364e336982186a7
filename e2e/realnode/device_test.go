package realnode

import (
	"archive/tar"
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpupolicy/gpupolicy/e2e/internal/realnode"
	standin "github.com/gpupolicy/gpupolicy/e2e/internal/standin/layout"
	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/nodefacts/hostfacts"
)

// allocatedDevice asks the real kubelet's pod-resources API which nvidia.com/gpu device it
// gave the workload's container; the time-slicing replica suffix is cut ("GPU-x::1" → "GPU-x").
func (s *nodeState) allocatedDevice() (string, error) {
	conn, err := grpc.NewClient("unix://"+s.n.PodResourcesSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := podresourcesv1.NewPodResourcesListerClient(conn).List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return "", fmt.Errorf("pod-resources List: %w", err)
	}
	for _, p := range resp.PodResources {
		if p.Namespace != workloadNS || p.Name != workloadName {
			continue
		}
		var ids []string
		for _, c := range p.Containers {
			for _, d := range c.Devices {
				if d.ResourceName == "nvidia.com/gpu" {
					ids = append(ids, d.DeviceIds...)
				}
			}
		}
		if len(ids) != 1 {
			return "", fmt.Errorf("pod-resources: the workload holds nvidia.com/gpu devices %v, want exactly one", ids)
		}
		uuid, _, _ := strings.Cut(ids[0], "::")
		return uuid, nil
	}
	return "", errors.New("pod-resources: the workload pod is not listed")
}

// ociSpec is the part of the OCI runtime spec the stand-in nvidia-container-runtime records.
type ociSpec struct {
	Process struct {
		Env []string `json:"env"`
	} `json:"process"`
}

// checkWorkloadDevice: the workload ran through the nvidia handler (the stand-in runtime
// recorded its OCI spec) and got exactly the device the kubelet allocated: on 1.6 as
// NVIDIA_VISIBLE_DEVICES (envvar), on 2.1 as the CDI device containerd resolved from the
// spec the toolkit stage wrote (the stand-in nvidia-ctk's device sets GPUPOLICY_E2E_CDI_DEVICE).
// It returns the device's UUID.
func (s *nodeState) checkWorkloadDevice(wl *corev1.Pod) string {
	t := s.t
	t.Helper()
	uuid, err := s.allocatedDevice()
	if err != nil {
		t.Fatal(err)
	}
	gpus := images.mockGPUs
	if !slices.Contains(gpus, uuid) {
		t.Fatalf("pod-resources: allocated %q is none of the mock's GPUs %v", uuid, gpus)
	}
	cid := strings.TrimPrefix(wl.Status.ContainerStatuses[0].ContainerID, "containerd://")
	recorded := s.n.HostPath(filepath.Join(standin.RecordDir, cid+".json"))
	b, err := os.ReadFile(recorded)
	if err != nil {
		t.Fatalf("the workload's container %s was not created through the nvidia handler (no OCI spec recorded by the stand-in nvidia-container-runtime): %v", cid, err)
	}
	var spec ociSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatalf("%s: %v", recorded, err)
	}
	s.checkInheritedRuncRoot(cid)
	env := map[string]string{}
	var cdiVars []string
	for _, kv := range spec.Process.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
		if strings.HasPrefix(k, standin.CDIDeviceEnv) {
			cdiVars = append(cdiVars, kv)
		}
	}
	key := "NVIDIA_VISIBLE_DEVICES"
	if s.c.strategy == config.DeviceListCDICRI {
		key = standin.CDIDeviceEnv
		// One device injected: its own variable and its indexed one, nothing of another GPU.
		if len(cdiVars) != 2 {
			t.Errorf("recorded spec carries CDI device variables %v, want exactly the allocated device's", cdiVars)
		}
		// And no device list for a real nvidia-container-runtime to widen it with (its
		// default for an unset variable is all GPUs).
		if v, ok := env["NVIDIA_VISIBLE_DEVICES"]; !ok || v == "all" || strings.Contains(v, "GPU-") {
			t.Errorf("recorded spec under cdi-cri: NVIDIA_VISIBLE_DEVICES=%q (set %v), want a value naming no GPU", v, ok)
		}
	}
	if env[key] != uuid {
		t.Errorf("recorded OCI spec of the workload: %s=%q, want the allocated device %s (env %v)", key, env[key], uuid, spec.Process.Env)
	}
	// And the process itself saw it (the workload stand-in prints its environment).
	eventually(t, 30*time.Second, "the workload printed its environment", s.diag, func() (bool, string) {
		l := podLog(s.n, wl, "job")
		return strings.Contains(l, standin.EnvPrefix+key+"="+uuid+"\n"), tail(l, 5)
	})
	t.Logf("containerd %s: workload %s got %s (%s=%s)", s.c.containerd, wl.Name, uuid, key, env[key])
	return uuid
}

// checkInheritedRuncRoot: the nvidia handler runs runc as the node's runc runtime does. The
// runc shim passes its options.Root to the runtime as --root <Root>/<namespace>; the stand-in
// nvidia-container-runtime logged the call that created container cid, and its --root must be
// the node's (realnode.RuncRoot), which the toolkit stage copied from the node's runc runtime
// into the handler (containerd's own default, /run/containerd/runc, means it did not).
func (s *nodeState) checkInheritedRuncRoot(cid string) {
	t := s.t
	t.Helper()
	b, err := os.ReadFile(s.n.HostPath(filepath.Join(standin.RecordDir, standin.CallLog)))
	if err != nil {
		t.Fatal(err)
	}
	want := realnode.RuncRoot + "/k8s.io"
	for line := range strings.Lines(string(b)) {
		var args []string
		if err := json.Unmarshal([]byte(line), &args); err != nil || !slices.Contains(args, "create") || !slices.Contains(args, cid) {
			continue
		}
		if i := slices.Index(args, "--root"); i < 0 || i+1 == len(args) || args[i+1] != want {
			t.Errorf("the nvidia handler created container %s with %q: want --root %s, the node runc runtime's Root (its settings were not inherited)", cid, args, want)
		}
		return
	}
	t.Errorf("no create call of container %s in the stand-in runtime's log:\n%s", cid, b)
}

// checkExporterAttributes scrapes the exporter pod over the pod network: a GPU metric of the
// allocated device carries the workload's pod and namespace (from the real kubelet's
// pod-resources socket).
func (s *nodeState) checkExporterAttributes(exp *corev1.Pod, uuid string) {
	s.t.Helper()
	url := fmt.Sprintf("http://%s:9400/metrics", exp.Status.PodIP)
	want := regexp.MustCompile(`^DCGM_FI_[A-Z_]+\{[^}]*\}`)
	eventually(s.t, 60*time.Second, "exporter attributes "+uuid+" to the workload at "+url, s.diag, func() (bool, string) {
		resp, err := http.Get(url)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		seen := ""
		for sc.Scan() {
			l := sc.Text()
			if !want.MatchString(l) || !strings.Contains(l, `UUID="`+uuid+`"`) {
				continue
			}
			seen = l
			if strings.Contains(l, `pod="`+workloadName+`"`) && strings.Contains(l, `namespace="`+workloadNS+`"`) {
				return true, ""
			}
		}
		return false, "last metric of the device: " + seen
	})
}

// klogTime reads the timestamp of a klog line ("I1201 23:14:19.232971 ...").
var klogRE = regexp.MustCompile(`^[IWEF](\d{4} \d{2}:\d{2}:\d{2}\.\d{6})`)

func klogTime(line string) (time.Time, bool) {
	m := klogRE.FindStringSubmatch(line)
	if m == nil {
		return time.Time{}, false
	}
	ts, err := time.ParseInLocation("0102 15:04:05.000000", m[1], time.Local)
	if err != nil {
		return time.Time{}, false
	}
	now := time.Now()
	return ts.AddDate(now.Year(), 0, 0), true
}

// registeredSince is when the kubelet's log shows the device plugin's registration after
// the kubelet's start number n (the supervisor's "### start n" marker).
func (s *nodeState) registeredSince(n int) (time.Time, bool) {
	log := s.n.Log("kubelet")
	marker := fmt.Sprintf("### start %d ", n)
	i := strings.Index(log, marker)
	if i < 0 {
		return time.Time{}, false
	}
	for _, l := range strings.Split(log[i:], "\n") {
		if strings.Contains(l, "Got registration request from device plugin with resource") && strings.Contains(l, `resourceName="nvidia.com/gpu"`) {
			return klogTime(l)
		}
	}
	return time.Time{}, false
}

// restartKubelet10 restarts the kubelet ten times: the device plugin registers again each
// time, allocatable comes back, the workload keeps running in the same container with the
// same device. It returns the worst restart → registration time (reported, not asserted).
func (s *nodeState) restartKubelet10(wl *corev1.Pod, uuid string) time.Duration {
	t := s.t
	t.Helper()
	cid := wl.Status.ContainerStatuses[0].ContainerID
	var worst time.Duration
	var all []string
	for i := 1; i <= 10; i++ {
		stopped := time.Now()
		if _, err := s.n.RestartKubelet(context.Background()); err != nil {
			t.Fatal(err)
		}
		starts, err := s.n.Starts("kubelet")
		if err != nil {
			t.Fatal(err)
		}
		var reg time.Time
		eventually(t, 60*time.Second, fmt.Sprintf("device plugin registered with the kubelet after restart %d", i), s.diag, func() (bool, string) {
			var ok bool
			reg, ok = s.registeredSince(len(starts))
			return ok, "no registration of nvidia.com/gpu in the kubelet log since its start"
		})
		d := reg.Sub(stopped)
		all = append(all, d.Round(time.Millisecond).String())
		worst = max(worst, d)
		s.waitAllocatable(mockGPUs * replicas)
		eventually(t, 30*time.Second, "the workload's device after kubelet restart", s.diag, func() (bool, string) {
			got, err := s.allocatedDevice()
			return err == nil && got == uuid, fmt.Sprintf("pod-resources: %q %v", got, err)
		})
		p, err := env.cs.CoreV1().Pods(workloadNS).Get(context.Background(), workloadName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cs := p.Status.ContainerStatuses; len(cs) != 1 || cs[0].ContainerID != cid || cs[0].RestartCount != 0 || p.Status.Phase != corev1.PodRunning {
			t.Fatalf("workload after kubelet restart %d: %s; want container %s still running", i, podSummary([]corev1.Pod{*p}), cid)
		}
	}
	t.Logf("containerd %s: kubelet restart → device plugin registered: %s (worst %s)", s.c.containerd, strings.Join(all, " "), worst.Round(time.Millisecond))
	return worst
}

// waitStackCondition waits for the agent's GPUStackReady condition (written with its real
// token through the guardrails) to have status and reason next to the real kubelet's own
// conditions, which must be unharmed: Ready stays True.
func (s *nodeState) waitStackCondition(status corev1.ConditionStatus, reason string) {
	s.t.Helper()
	eventually(s.t, 60*time.Second, fmt.Sprintf("%s=%s (%s) on %s", config.ConditionGPUStackReady, status, reason, s.n.Name), s.diag, func() (bool, string) {
		node, err := getNode(s.n.Name)
		if err != nil {
			return false, err.Error()
		}
		var got []string
		ok, kubeletReady := false, false
		for _, c := range node.Status.Conditions {
			got = append(got, fmt.Sprintf("%s=%s (%s)", c.Type, c.Status, c.Reason))
			ok = ok || (c.Type == config.ConditionGPUStackReady && c.Status == status && c.Reason == reason)
			kubeletReady = kubeletReady || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
		}
		return ok && kubeletReady, strings.Join(got, ", ")
	})
}

// restartContainerd stops containerd with SIGTERM (the supervisor starts it again, as
// systemd would): every stage pod is Ready again, the gates stay open, the device plugin
// stays registered and the workload keeps running.
func (s *nodeState) restartContainerd(wl *corev1.Pod) {
	t := s.t
	t.Helper()
	before, _ := s.n.Starts("containerd")
	if _, err := s.n.Restart(context.Background(), "containerd"); err != nil {
		t.Fatal(err)
	}
	after, _ := s.n.Starts("containerd")
	if len(after) != len(before)+1 {
		t.Fatalf("containerd starts %d → %d", len(before), len(after))
	}
	for _, ds := range []string{"gpu-node-agent", "gpu-driver", "gpu-container-toolkit", "gpu-device-plugin-" + poolName, "gpu-feature-discovery", "gpu-exporter"} {
		s.waitStagePod(ds, 90*time.Second)
	}
	node, err := getNode(s.n.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{config.LabelDeployToolkit, config.LabelToolkitReady, config.LabelDeployDevicePlugin, config.LabelDeployFeatureDiscovery, config.LabelDeployExporter} {
		if node.Labels[l] != "true" {
			t.Errorf("after containerd's restart %s=%q, want true (labels %s)", l, node.Labels[l], nvidiaLabels(node))
		}
	}
	s.waitAllocatable(mockGPUs * replicas)
	s.waitStackCondition(corev1.ConditionTrue, config.ReasonStackReady)
	p, err := env.cs.CoreV1().Pods(workloadNS).Get(context.Background(), workloadName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodRunning || p.Status.ContainerStatuses[0].ContainerID != wl.Status.ContainerStatuses[0].ContainerID {
		t.Errorf("workload after containerd's restart: %s", podSummary([]corev1.Pod{*p}))
	}
}

// brokenDropIn rolls out a drop-in containerd refuses: containerd keeps running on its old
// config (no restart, same PID, the installed drop-in unchanged), the toolkit gate closes,
// and the toolkit's log names the reason.
func (s *nodeState) brokenDropIn() {
	t := s.t
	t.Helper()
	before, _ := s.n.Starts("containerd")
	installed := s.n.HostPath("/etc/containerd/conf.d/" + config.DropInFile)
	old, err := os.ReadFile(installed)
	if err != nil {
		t.Fatal(err)
	}
	oldPod := stagePod(t, s.r.ns, "gpu-container-toolkit", s.n.Name)
	rolledOut := time.Now().Add(-time.Second) // Event times have second precision
	broken := render(t, s.c.broken)
	broken.reseal(t)
	reapply(t, broken)
	var tk *corev1.Pod
	eventually(t, 90*time.Second, "the toolkit pod of the broken revision started", s.diag, func() (bool, string) {
		tk = stagePod(t, s.r.ns, "gpu-container-toolkit", s.n.Name)
		if tk == nil || tk.UID == oldPod.UID {
			return false, "still the old toolkit pod"
		}
		for _, c := range tk.Status.ContainerStatuses {
			if c.Name == "install" && (c.State.Running != nil || c.State.Terminated != nil || c.LastTerminationState.Terminated != nil) {
				return true, ""
			}
		}
		return false, podSummary([]corev1.Pod{*tk})
	})
	eventually(t, 60*time.Second, "toolkit gate closed after the broken drop-in", s.diag, func() (bool, string) {
		node, err := getNode(s.n.Name)
		if err != nil {
			return false, err.Error()
		}
		return node.Labels[config.LabelToolkitReady] != "true" && node.Labels[config.LabelDeployDevicePlugin] != "true", nvidiaLabels(node)
	})
	// containerd's own words for runtime_type = 42, passed through by the toolkit stage.
	refusal := map[string]string{
		"1.6": "Can't convert 42(int64) to string",
		"2.1": "cannot decode TOML integer into struct field config.Runtime.Type",
	}[s.c.containerd]
	eventually(t, 30*time.Second, "the toolkit's log names the broken drop-in ("+refusal+")", s.diag, func() (bool, string) {
		l := podLog(s.n, tk, "install")
		return strings.Contains(l, "containerd config dump") && strings.Contains(l, refusal), tail(l, 8)
	})
	// The agent says so on the node: a Warning Event naming the toolkit stage and containerd's
	// reason (the toolkit records it in the status file; the gate shows it).
	eventually(t, 30*time.Second, "a StageNotReady Event for the toolkit stage on "+s.n.Name, s.diag, func() (bool, string) {
		evs, err := env.cs.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + s.n.Name + ",reason=StageNotReady"})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning && strings.HasPrefix(e.Message, "stage "+config.StageToolkit+": ") &&
				strings.Contains(e.Message, refusal) && !e.LastTimestamp.Time.Before(rolledOut) {
				t.Logf("containerd %s: the agent's Event for the broken drop-in: %s", s.c.containerd, e.Message)
				return true, ""
			}
			seen = append(seen, e.Message)
		}
		return false, fmt.Sprintf("StageNotReady events: %q", seen)
	})
	s.waitStackCondition(corev1.ConditionFalse, config.ReasonToolkitInstallFailed)
	// The status file may still vouch for the old drop-in (containerd does run it), never for
	// the broken one.
	if st, err := hostfacts.ReadToolkitStatus(s.n.HostPath("/")); err == nil && st.Verified && st.DropInSHA256 == broken.agent.Toolkit.DropInSHA256 {
		t.Errorf("the toolkit status file says the broken drop-in is verified: %+v", st)
	}
	after, _ := s.n.Starts("containerd")
	if len(after) != len(before) {
		t.Errorf("containerd restarted for a drop-in it refuses: starts %v → %v", before, after)
	}
	if pid, err := s.n.PIDOf("containerd"); err != nil || pid != before[len(before)-1].PID {
		t.Errorf("containerd now runs as pid %d (%v), want the old process %d", pid, err, before[len(before)-1].PID)
	}
	if now, _ := os.ReadFile(installed); string(now) != string(old) {
		t.Errorf("the installed drop-in changed to the broken one:\n%s", now)
	}
	dump, err := s.n.ConfigDump(context.Background())
	if err != nil {
		t.Errorf("containerd config dump on the node's files after the refused drop-in: %v", err)
	} else if !strings.Contains(dump, "runtimes.nvidia]") {
		t.Errorf("the node's config lost the nvidia handler after the refused drop-in:\n%s", dump)
	}
}

// timingFile collects the suite's numbers in <workdir>/timing.md (no timed assertions).
type timingFile struct {
	mu   sync.Mutex
	path string
	rows []string
}

func newTimingFile(t *testing.T) *timingFile {
	f := &timingFile{path: filepath.Join(env.workDir, "timing.md")}
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		body := "| node | measured | time |\n|---|---|---|\n" + strings.Join(f.rows, "\n") + "\n"
		if err := os.WriteFile(f.path, []byte(body), 0o644); err != nil {
			t.Error(err)
		}
		t.Logf("timing (%s):\n%s", f.path, body)
	})
	return f
}

func (f *timingFile) add(row string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rows = append(f.rows, row)
}

// readArchiveManifest returns manifest.json of a docker-archive.
func readArchiveManifest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return "", fmt.Errorf("%s: no manifest.json (not a docker-archive)", path)
		}
		if err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		if h.Name == "manifest.json" {
			b, err := io.ReadAll(tr)
			return string(b), err
		}
	}
}
