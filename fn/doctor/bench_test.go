package doctor

import (
	"context"
	"fmt"
	"io"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpupolicy/gpupolicy/fn/doctor/doctortest"
)

// BenchmarkDiagnose: a 200-GPU-node fleet (every 10th node with its toolkit broken), 1,600
// running GPU pods and 50 pending ones, each with a scheduler event. Includes the fake
// clientset's list copies, so it is an upper bound of doctor's own work.
func BenchmarkDiagnose(b *testing.B) {
	objs := []runtime.Object{agentConfigMap(), policyRuntimeClass()}
	for i := range 200 {
		name := fmt.Sprintf("gpu-%03d", i)
		if i%10 == 0 {
			objs = append(objs, gpuNode(name, toolkitBroken))
		} else {
			objs = append(objs, gpuNode(name))
		}
		for j := range 8 {
			objs = append(objs, gpuPod("train", fmt.Sprintf("%s-%d", name, j), 1, boundTo(name, corev1.PodRunning)))
		}
	}
	for i := range 50 {
		p := gpuPod("train", fmt.Sprintf("pending-%d", i), 1)
		objs = append(objs, p, warning(p, "FailedScheduling", "0/200 nodes are available: 200 Insufficient nvidia.com/gpu."))
	}
	client := fake.NewClientset(objs...)
	b.ReportAllocs()
	for b.Loop() {
		r, err := Diagnose(context.Background(), Input{Cluster: doctortest.FromClientset(client)})
		if err != nil || len(r.Pods) != 50 || len(r.Nodes) != 200 {
			b.Fatalf("%v: %d pods, %d nodes", err, len(r.Pods), len(r.Nodes))
		}
		if err := writeTable(io.Discard, r); err != nil {
			b.Fatal(err)
		}
	}
}
