package discover

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpupolicy/gpupolicy/plugin/agent/nodeapi"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// Component names the program in Events and logs.
const Component = "gpu-discovery"

// ReasonGPULost is the Warning Event reason when a GPU seen earlier is no longer on the bus.
const ReasonGPULost = "GPULost"

// Result is one pass: the GPUs found and what the node's label says afterwards.
type Result struct {
	GPUs  []Device
	Label string // the node's nvidia.com/gpu.present after the pass ("" when absent)
	// OptOut: the node carries a value other than "true" that a person set; it is kept.
	OptOut bool
}

// Reconciler keeps one node's nvidia.com/gpu.present in step with its PCI bus. It remembers
// the GPUs of its previous pass to report a lost one once; a restart forgets them, and the
// driver stage's checks report the node from then on.
type Reconciler struct {
	Client   kubernetes.Interface
	Node     string
	HostRoot string
	Log      *slog.Logger

	seen         []string // GPU addresses of the last pass that reported successfully
	optOutLogged bool
}

// Reconcile scans the bus, sets the label when a GPU is there and the label is absent, and
// posts a GPULost Warning Event when GPUs of the previous pass are gone. An error means the
// program could not do its job (sysfs unreadable, API server unreachable).
func (r *Reconciler) Reconcile(ctx context.Context) (Result, error) {
	gpus, err := Scan(r.HostRoot)
	if err != nil {
		return Result{}, err
	}
	labelled := false
	node, err := nodeapi.Converge(ctx, r.Client, r.Node, func(n *corev1.Node) []nodeapi.Change {
		if _, set := n.Labels[config.LabelGPUPresent]; set || len(gpus) == 0 {
			return nil // a person's value (or ours) stays; a CPU node gets nothing
		}
		labelled = true
		return []nodeapi.Change{{Labels: map[string]*string{config.LabelGPUPresent: nodeapi.Value("true")}}}
	})
	if err != nil {
		return Result{GPUs: gpus}, err
	}
	res := Result{GPUs: gpus, Label: node.Labels[config.LabelGPUPresent]}
	_, set := node.Labels[config.LabelGPUPresent]
	res.OptOut = set && res.Label != "true"
	log := r.Log.With("node", r.Node, "stage", Component)
	if labelled && res.Label == "true" {
		log.Info("GPU found: node labelled", "label", config.LabelGPUPresent, "gpus", Addresses(gpus))
	}
	switch {
	case res.OptOut && len(gpus) > 0 && !r.optOutLogged:
		log.Info("GPU found but the node opts out: its label is kept", "label", config.LabelGPUPresent, "value", res.Label, "gpus", len(gpus))
		r.optOutLogged = true
	case !res.OptOut:
		r.optOutLogged = false
	}
	now := Addresses(gpus)
	if lost := missing(r.seen, now); len(lost) > 0 {
		msg := fmt.Sprintf("%d GPU(s) no longer on the PCI bus: %s (%d left); %s is kept, the stage checks report what no longer works",
			len(lost), strings.Join(lost, ", "), len(now), config.LabelGPUPresent)
		log.Warn("GPU lost", "lost", lost, "left", len(now))
		if err := nodeapi.Event(ctx, r.Client, node, Component, corev1.EventTypeWarning, ReasonGPULost, msg); err != nil {
			return res, err // seen stays: the next pass reports the loss again
		}
	}
	if !slices.Equal(r.seen, now) && len(now) > 0 {
		log.Info("GPUs on the PCI bus", "gpus", now)
	}
	r.seen = now
	return res, nil
}

// missing lists the addresses of was that are not in now (both sorted).
func missing(was, now []string) []string {
	var out []string
	for _, a := range was {
		if _, found := slices.BinarySearch(now, a); !found {
			out = append(out, a)
		}
	}
	return out
}
