package fakenode

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// DriverContainer is the rendered driver container (driver.source container).
const DriverContainer = "nvidia-driver"

// upgradeState is what EnableUpgrades adds to a fleet.
type upgradeState struct {
	lease time.Duration
	// restart cancels the running upgrade process of a node (by node); its supervisor then
	// starts a new one, as the kubelet restarts a container that died.
	restart map[string]context.CancelFunc
}

// EnableUpgrades makes the fleet play driver upgrades: every node's agent also runs the real
// `gpu-node-agent upgrade` (the rendered driver-upgrade container) with the agent's identity,
// and a running driver container pod loads its image's driver on its node's host (the version
// is the image tag's, 580.95.05 of nvcr.io/nvidia/driver:580.95.05-ubuntu24.04) while a
// deleted one unloads it, as NVIDIA's driver container does. leaseDuration is the agents'
// --lease-duration. Call it before Start.
func (f *Fleet) EnableUpgrades(leaseDuration time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.upgrades = &upgradeState{lease: leaseDuration, restart: map[string]context.CancelFunc{}}
}

// RestartUpgrade kills node's upgrade process; a new one starts a second later.
func (f *Fleet) RestartUpgrade(node string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.upgrades == nil || f.upgrades.restart[node] == nil {
		return fmt.Errorf("node %s runs no upgrade process", node)
	}
	f.upgrades.restart[node]()
	return nil
}

// superviseUpgrade runs node's upgrade process until ctx ends, restarting it when
// RestartUpgrade killed it.
func (f *Fleet) superviseUpgrade(ctx context.Context, h *Host) {
	for ctx.Err() == nil {
		pctx, cancel := context.WithCancel(ctx)
		f.mu.Lock()
		f.upgrades.restart[h.Node] = cancel
		lease := f.upgrades.lease
		f.mu.Unlock()
		f.runProgram(pctx, h, "upgrade", f.agentDS.Spec.Template.Spec.ServiceAccountName,
			// No --interval: the rendered default (30 s), so the step moves on its watches.
			"upgrade", "--config", f.agentCfgPath, "--node", h.Node, "--namespace", f.agentDS.Namespace,
			"--lease-duration", lease.String())
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// isDriverPod reports whether p runs the driver container.
func isDriverPod(p *corev1.Pod) bool {
	for _, c := range p.Spec.Containers {
		if c.Name == DriverContainer {
			return true
		}
	}
	return false
}

// driverPodChanged loads the pod's driver on its node while the pod runs, and unloads it when
// the pod is deleted.
func (f *Fleet) driverPodChanged(p *corev1.Pod, gone bool) {
	f.mu.Lock()
	h := f.hosts[p.Spec.NodeName]
	f.mu.Unlock()
	if h == nil {
		return
	}
	version := ""
	if !gone && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
		version = imageDriverVersion(p)
	} else if !gone && p.DeletionTimestamp == nil {
		return // pending: the old driver (if any) stays until this pod runs
	}
	if err := h.SetDriver(version); err != nil {
		f.recordErr(h.Node, fmt.Errorf("driver container: %w", err))
	}
}

// imageDriverVersion is the driver version of the pod's driver image tag.
func imageDriverVersion(p *corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		if c.Name == DriverContainer {
			tag := c.Image[strings.LastIndex(c.Image, ":")+1:]
			v, _, _ := strings.Cut(tag, "-")
			return v
		}
	}
	return ""
}
