package nodeapi

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

func TestConvergeAppliesStepsAndRefusesForeignKeys(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"a": "1", "nvidia.com/x": "old"}}})
	want := map[string]string{"nvidia.com/x": "", "nvidia.com/y": "2"}
	n, err := Converge(ctx, cs, "n", func(n *corev1.Node) []Change {
		if c := Diff(n, want, nil); !c.Empty() {
			return []Change{c}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, has := n.Labels["nvidia.com/x"]; has || n.Labels["nvidia.com/y"] != "2" || n.Labels["a"] != "1" {
		t.Fatalf("labels %v", n.Labels)
	}
	_, err = Converge(ctx, cs, "n", func(*corev1.Node) []Change {
		return []Change{{Labels: map[string]*string{"a": Value("2")}}}
	})
	if err == nil || !strings.Contains(err.Error(), "only manages keys under nvidia.com/") {
		t.Fatalf("foreign key: %v", err)
	}
	_, err = Converge(ctx, cs, "n", func(*corev1.Node) []Change {
		return []Change{{Annotations: map[string]*string{"nvidia.com/flip": Value("x")}}}
	})
	if err == nil || !strings.Contains(err.Error(), "did not converge") {
		t.Fatalf("endless plan: %v", err)
	}
	if _, err := Converge(ctx, cs, "missing", func(*corev1.Node) []Change { return nil }); err == nil {
		t.Fatal("missing node accepted")
	}
}

func TestEventOnNode(t *testing.T) {
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "u-1"}}
	cs := fake.NewClientset(node)
	if err := Event(ctx, cs, node, "gpu-node-agent", corev1.EventTypeWarning, "DriverDrift", "expected a, found b"); err != nil {
		t.Fatal(err)
	}
	l, _ := cs.CoreV1().Events(EventNamespace).List(ctx, metav1.ListOptions{})
	if len(l.Items) != 1 {
		t.Fatalf("%d events", len(l.Items))
	}
	e := l.Items[0]
	if e.InvolvedObject.Kind != "Node" || e.InvolvedObject.UID != "u-1" || e.Source.Host != "n" || e.Reason != "DriverDrift" || !strings.HasPrefix(e.Name, "n.") {
		t.Fatalf("event %+v", e)
	}
}

func TestSetConditionNamesTheFixWhenForbidden(t *testing.T) {
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}})
	cs.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes/status"}, "n", errors.New("RBAC: no patch"))
		}
		return false, nil, nil
	})
	_, err := SetCondition(context.Background(), cs, "n", corev1.NodeCondition{Type: config.ConditionGPUStackReady, Status: corev1.ConditionTrue})
	if err == nil || !strings.Contains(err.Error(), "patch on nodes/status") || !strings.Contains(err.Error(), "re-render with gpupolicy-fn") {
		t.Fatalf("want the fix named, got %v", err)
	}
}
