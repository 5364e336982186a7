package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// operatorDriver is the GPU Operator's driver DaemonSet and its container.
const (
	operatorDriver          = "nvidia-driver-daemonset"
	operatorDriverContainer = "nvidia-driver-ctr"
)

// kernelModuleVars are the driver container's variables that choose its kernel modules.
var kernelModuleVars = []string{"KERNEL_MODULE_TYPE", "OPEN_KERNEL_MODULES_ENABLED"}

// TestKernelModuleTypeMatchesGPUOperator: for each driver.kernelModuleType (open, proprietary,
// auto), NVIDIA's real GPU Operator renders its driver DaemonSet from the chart's ClusterPolicy
// with that value, and gpupolicy renders its driver DaemonSet from the policy `gpupolicy-fn
// import` makes of that live ClusterPolicy: the driver container's KERNEL_MODULE_TYPE and
// OPEN_KERNEL_MODULES_ENABLED are the same in both.
func TestKernelModuleTypeMatchesGPUOperator(t *testing.T) {
	ctx := context.Background()
	to := startTakeover(t, "kernel-modules")
	to.joinNode(t, "kmt-gpu-1", true)
	for i, kind := range []string{"open", "proprietary", "auto"} {
		if i == 0 {
			to.applyChartClusterPolicy(t, func(cp *unstructured.Unstructured) {
				if err := unstructured.SetNestedField(cp.Object, kind, "spec", "driver", "kernelModuleType"); err != nil {
					t.Fatal(err)
				}
			})
		} else {
			cp, err := to.dyn.Resource(clusterPolicyGVR).Get(ctx, "cluster-policy", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := unstructured.SetNestedField(cp.Object, kind, "spec", "driver", "kernelModuleType"); err != nil {
				t.Fatal(err)
			}
			if _, err := to.dyn.Resource(clusterPolicyGVR).Update(ctx, cp, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		var theirs map[string]string
		eventually(t, 2*time.Minute, "the GPU Operator's driver DaemonSet with KERNEL_MODULE_TYPE="+kind, func() (bool, string) {
			ds, err := to.cs.AppsV1().DaemonSets(operatorNamespace).Get(ctx, operatorDriver, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			theirs = containerVars(ds, operatorDriverContainer)
			return theirs["KERNEL_MODULE_TYPE"] == kind, fmt.Sprint(theirs)
		})
		policy := to.importLive(t)
		out := filepath.Join(to.dir, "rendered-"+kind)
		if b, err := exec.Command(filepath.Join(env.repoRoot, "bin", "gpupolicy-fn"), "render", "-f", policy, "-o", out).CombinedOutput(); err != nil {
			t.Fatalf("render: %v\n%s", err, b)
		}
		var ours appsv1.DaemonSet
		readObject(t, filepath.Join(out, "01-driver", "daemonset-gpu-driver.yaml"), &ours)
		got := containerVars(&ours, "nvidia-driver")
		for _, v := range kernelModuleVars {
			if got[v] != theirs[v] {
				t.Errorf("kernelModuleType %s: %s=%q in gpupolicy's driver container, %q in the GPU Operator's", kind, v, got[v], theirs[v])
			}
		}
		t.Logf("kernelModuleType %s: both %v", kind, theirs)
	}
}

// containerVars are kernelModuleVars of container name of ds ("" when unset).
func containerVars(ds *appsv1.DaemonSet, name string) map[string]string {
	out := map[string]string{}
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name != name {
			continue
		}
		for _, e := range c.Env {
			for _, v := range kernelModuleVars {
				if e.Name == v {
					out[v] = e.Value
				}
			}
		}
	}
	return out
}
