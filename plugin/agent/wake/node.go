package wake

import (
	"context"
	"log/slog"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// NodeWhy is the reason of a poke from the Node watch.
const NodeWhy = "node labels or annotations changed"

// Node pokes t when the labels or annotations of Node name change (a person's opt-out "false"
// or re-enable, a gate label removed by hand), through a watch restricted to that one Node
// (field selector metadata.name), until ctx ends. Status updates (heartbeats, conditions) do
// not poke. A watch that cannot start or fails is re-established after a backoff (from 1s,
// doubling to maxBackoff, logged); one the API server ends normally, at once. The first event
// of every new watch pokes: what changed while none ran was not seen.
func (t *Trigger) Node(ctx context.Context, log *slog.Logger, client kubernetes.Interface, name string, maxBackoff time.Duration) {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	backoff := Backoff{Max: maxBackoff}
	var last *metav1.ObjectMeta // labels and annotations last seen; nil: a new watch
	rv := ""
	for ctx.Err() == nil {
		w, err := client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d := backoff.Next()
			log.Info("node watch failed; retrying (the interval still re-validates)", "node", name, "error", err.Error(), "retryIn", d.String())
			if !sleep(ctx, d) {
				return
			}
			continue
		}
		last = nil
		failed := false
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Error:
				// 410 Gone: the resourceVersion is too old; start afresh (and poke, above).
				failed = true
				rv = ""
				if st := apierrors.FromObject(ev.Object); !apierrors.IsGone(st) && !apierrors.IsResourceExpired(st) {
					log.Info("node watch ended with an error; retrying", "node", name, "error", st.Error())
				}
			case watch.Bookmark:
				if n, ok := ev.Object.(*corev1.Node); ok {
					rv = n.ResourceVersion
				}
			case watch.Added, watch.Modified, watch.Deleted:
				n, ok := ev.Object.(*corev1.Node)
				if !ok || n.Name != name {
					continue
				}
				rv = n.ResourceVersion
				if last == nil || !maps.Equal(last.Labels, n.Labels) || !maps.Equal(last.Annotations, n.Annotations) || ev.Type == watch.Deleted {
					t.Poke(NodeWhy)
				}
				last = &metav1.ObjectMeta{Labels: n.Labels, Annotations: n.Annotations}
				backoff.Reset()
			}
			if failed {
				break
			}
		}
		w.Stop()
		if failed && !sleep(ctx, backoff.Next()) {
			return
		}
	}
}
