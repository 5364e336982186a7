package upgrade

import (
	"context"
	"log/slog"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/gpupolicy/gpupolicy/plugin/agent/wake"
)

// watches wake the step when what it waits for changes, so the pass interval can stay long
// (every pass reads the Node, the DaemonSet, its revisions and the node's pods): the pods on
// this node (an eviction finished, the new driver pod runs), the driver DaemonSets of the
// namespace (a new revision) and the slot Leases (a slot freed). The Node itself is watched by
// wake.Trigger.Node.
func (u *Upgrader) watches(ctx context.Context, t *wake.Trigger, maxBackoff time.Duration) {
	log := u.log()
	onNode := fields.OneTermEqualSelector("spec.nodeName", u.Node).String()
	// Every pool's slots: which pool the node is in can change with its labels.
	slots := LabelSlotPool
	go watchLoop(ctx, log, t, "pods on the node changed", maxBackoff, func(ctx context.Context, rv string) (watch.Interface, error) {
		return u.Client.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{FieldSelector: onNode, ResourceVersion: rv})
	})
	go watchLoop(ctx, log, t, "driver DaemonSet changed", maxBackoff, func(ctx context.Context, rv string) (watch.Interface, error) {
		return u.Client.AppsV1().DaemonSets(u.Namespace).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	})
	go watchLoop(ctx, log, t, "upgrade slot changed", maxBackoff, func(ctx context.Context, rv string) (watch.Interface, error) {
		return u.Client.CoordinationV1().Leases(u.Namespace).Watch(ctx, metav1.ListOptions{LabelSelector: slots, ResourceVersion: rv})
	})
}

// watchLoop pokes t with why on every event of the watches start opens, re-opening a watch
// that ends (at once) or fails (after a backoff), until ctx ends. Missing an event only delays
// the step to its next pass.
func watchLoop(ctx context.Context, log *slog.Logger, t *wake.Trigger, why string, maxBackoff time.Duration, start func(context.Context, string) (watch.Interface, error)) {
	backoff := wake.Backoff{Max: maxBackoff}
	for ctx.Err() == nil {
		w, err := start(ctx, "")
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d := backoff.Next()
			log.Warn("watch failed; retrying (the interval still drives the step)", "watch", why, "error", err.Error(), "retryIn", d.String())
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				if st := apierrors.FromObject(ev.Object); !apierrors.IsGone(st) && !apierrors.IsResourceExpired(st) {
					log.Info("watch ended with an error; retrying", "watch", why, "error", st.Error())
				}
				break
			}
			backoff.Reset()
			t.Poke(why)
		}
		w.Stop()
	}
}
