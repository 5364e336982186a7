// Package fakenode plays the node side of the GPU stack on a real control plane: kwok-managed
// Node objects (kwok marks them Ready and runs their pods), a host filesystem per node as the
// node agent reads it under --host-root, and the agent's real gate reconcile for every node
// whose agent pod is running, acting with the agent's own identity.
package fakenode

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/gpupolicy/gpupolicy/e2e/internal/cluster"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// Spec describes a fake node.
type Spec struct {
	Name string
	// GPU nodes carry the entry label nvidia.com/gpu.present=true.
	GPU    bool
	Labels map[string]string
}

// Object is the Node a Spec registers: managed by kwok through its annotation, Linux/amd64
// like the real fleet.
func (s Spec) Object() *corev1.Node {
	labels := map[string]string{
		"kubernetes.io/hostname": s.Name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		"type":                   "kwok",
	}
	if s.GPU {
		labels[config.LabelGPUPresent] = "true"
	}
	for k, v := range s.Labels {
		labels[k] = v
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        s.Name,
			Labels:      labels,
			Annotations: map[string]string{cluster.FakeNodeAnnotation: cluster.FakeNodeValue},
		},
	}
}

// Join registers the node; kwok picks it up and reports it Ready.
func Join(ctx context.Context, cs kubernetes.Interface, s Spec) (*corev1.Node, error) {
	n, err := cs.CoreV1().Nodes().Create(ctx, s.Object(), metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("register fake node %s: %w", s.Name, err)
	}
	return n, nil
}

// WaitReady waits until kwok reports the node Ready.
func WaitReady(ctx context.Context, cs kubernetes.Interface, name string, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("fake node %s not Ready after %s (is kwok running?): %w", name, timeout, err)
	}
	return nil
}
