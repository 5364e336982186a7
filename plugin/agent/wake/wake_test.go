package wake

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// wait returns the reasons of the next wake-up, failing after 10s.
func wait(t *testing.T, tr *Trigger, what string) []string {
	t.Helper()
	select {
	case <-tr.C():
		return tr.Take()
	case <-time.After(10 * time.Second):
		t.Fatalf("no wake-up for %s", what)
		return nil
	}
}

// A burst of pokes is one wake-up carrying every reason once.
func TestTriggerCoalesces(t *testing.T) {
	tr := New()
	for range 5 {
		tr.Poke("b")
		tr.Poke("a")
	}
	if got := wait(t, tr, "the burst"); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("reasons %v", got)
	}
	select {
	case <-tr.C():
		t.Fatal("a second wake-up for one burst")
	default:
	}
}

// A directory that does not exist yet is followed as it is created level by level, and only
// the named entry pokes.
func TestFilesFollowsMissingDirectory(t *testing.T) {
	root := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr := New()
	if err := tr.Files(ctx, quiet, root, Dir{Path: "/var/lib/gpupolicy", Names: []string{"status.json"}, Why: "status"}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "var/lib/gpupolicy")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	wait(t, tr, "the directory appearing")
	// Let the watch settle on the new directory, then drop what the creation queued.
	time.Sleep(100 * time.Millisecond)
	tr.Take()
	if err := os.WriteFile(filepath.Join(dir, "other"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, ".status.json.tmp")
	if err := os.WriteFile(tmp, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "status.json")); err != nil {
		t.Fatal(err)
	}
	if got := wait(t, tr, "the status file renamed into place"); !slices.Equal(got, []string{"status"}) {
		t.Fatalf("reasons %v", got)
	}
}

// The Node watch pokes on a label change, not on a status update (heartbeats).
func TestNodeWatchPokesOnLabelsOnly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"a": "1"}}})
	tr := New()
	go tr.Node(ctx, quiet, cs, "n1", time.Minute)
	update := func(change func(*corev1.Node)) {
		t.Helper()
		n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		change(n)
		if _, err := cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The first event of a watch pokes (changes before it were not seen): wait for the watch.
	for {
		update(func(n *corev1.Node) { n.Status.Phase = corev1.NodeRunning })
		select {
		case <-tr.C():
		case <-time.After(50 * time.Millisecond):
			continue
		}
		break
	}
	tr.Take()
	update(func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	})
	select {
	case <-tr.C():
		t.Fatal("a status update woke the gate")
	case <-time.After(100 * time.Millisecond):
	}
	update(func(n *corev1.Node) { n.Labels["nvidia.com/gpu.deploy.device-plugin"] = "false" })
	if got := wait(t, tr, "the opt-out label"); !slices.Equal(got, []string{NodeWhy}) {
		t.Fatalf("reasons %v", got)
	}
}

// TestWait: Wait returns on a Poke long before its interval, on the interval without one, and
// with ctx's error once ctx ends; it leaves the reason for Take.
func TestWait(t *testing.T) {
	tr := New()
	tr.Poke("status file")
	if err := tr.Wait(context.Background(), time.Hour); err != nil {
		t.Fatalf("poked: %v", err)
	}
	if why := tr.Take(); len(why) != 1 || why[0] != "status file" {
		t.Fatalf("Take after Wait = %v", why)
	}
	if err := tr.Wait(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("interval: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tr.Wait(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("ended ctx: %v", err)
	}
	var none *Trigger
	if err := none.Wait(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("nil Trigger: %v", err)
	}
}
