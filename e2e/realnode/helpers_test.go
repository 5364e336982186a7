package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpupolicy/gpupolicy/e2e/internal/realnode"
	"github.com/gpupolicy/gpupolicy/e2e/internal/wait"
)

// eventually is wait.Eventually with the node's diagnosis on timeout.
func eventually(t *testing.T, timeout time.Duration, what string, diag func() string, cond func() (bool, string)) {
	t.Helper()
	wait.Eventually(t, timeout, what, diag, cond)
}

// podSummary describes pods for failure messages: phase, readiness, restarts and why a
// container waits or terminated.
func podSummary(pods []corev1.Pod) string {
	var out []string
	for _, p := range pods {
		s := fmt.Sprintf("%s/%s %s ready=%v", p.Namespace, p.Name, p.Status.Phase, podReady(&p))
		for _, c := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			s += fmt.Sprintf(" [%s restarts=%d", c.Name, c.RestartCount)
			if w := c.State.Waiting; w != nil {
				s += " waiting " + w.Reason + ": " + w.Message
			}
			if x := c.State.Terminated; x != nil {
				s += fmt.Sprintf(" terminated %s (%d): %s", x.Reason, x.ExitCode, x.Message)
			}
			if x := c.LastTerminationState.Terminated; x != nil {
				s += fmt.Sprintf(" last: %s (%d)", x.Reason, x.ExitCode)
			}
			s += "]"
		}
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue && c.Message != "" {
				s += fmt.Sprintf(" {%s: %s}", c.Type, c.Message)
			}
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return strings.Join(out, "\n  ")
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podLog is a container's log as the node's kubelet wrote it (/var/log/pods), all restarts
// in order: read from the node's tree, so it works whatever the API server's kubelet
// connection can do.
func podLog(n *realnode.Node, p *corev1.Pod, container string) string {
	dir := n.HostPath(filepath.Join("/var/log/pods", p.Namespace+"_"+p.Name+"_"+string(p.UID), container))
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	sort.Strings(files)
	var b strings.Builder
	for _, f := range files {
		c, _ := os.ReadFile(f)
		b.Write(c)
	}
	return b.String()
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n    ")
}

// nvidiaLabels lists a node's nvidia.com/ labels, sorted, for messages.
func nvidiaLabels(n *corev1.Node) string {
	var out []string
	for k, v := range n.Labels {
		if strings.HasPrefix(k, "nvidia.com/") {
			out = append(out, k+"="+v)
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func getNode(name string) (*corev1.Node, error) {
	return env.cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
}
