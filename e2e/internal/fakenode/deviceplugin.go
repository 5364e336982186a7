package fakenode

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GPUsPerNode is how many GPUs a fake GPU node has (the dgxa100 mock's count).
const GPUsPerNode = 8

// devicePluginChanged plays the kubelet's device manager for a device-plugin pod: while the
// pod runs, the node advertises the resource (GPUs × the time-slicing replicas of the node's
// pool) in capacity and allocatable; when it goes away, allocatable drops to 0 and capacity
// stays, as the kubelet does when a plugin unregisters.
func (f *Fleet) devicePluginChanged(ctx context.Context, p *corev1.Pod, running bool) {
	node := p.Spec.NodeName
	f.mu.Lock()
	_, ours := f.hosts[node]
	f.mu.Unlock()
	if !ours {
		return
	}
	n, err := f.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		f.recordErr(node, fmt.Errorf("device plugin: %w", err))
		return
	}
	dp := f.agentCfg.PoolFor(n.Labels)
	count := GPUsPerNode * max(1, dp.Sharing.TimeSlicing.Replicas)
	allocatable := count
	if !running {
		allocatable = 0
	}
	res := corev1.ResourceName(dp.ResourceName)
	if q, ok := n.Status.Allocatable[res]; ok && q.Value() == int64(allocatable) {
		return
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{
		"capacity":    map[string]string{string(res): strconv.Itoa(count)},
		"allocatable": map[string]string{string(res): strconv.Itoa(allocatable)},
	}})
	if _, err := f.cs.CoreV1().Nodes().PatchStatus(ctx, node, patch); err != nil && ctx.Err() == nil {
		f.recordErr(node, fmt.Errorf("device plugin: advertise %s=%d: %w", res, allocatable, err))
	}
}
