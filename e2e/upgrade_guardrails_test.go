package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gpupolicy/gpupolicy/e2e/internal/cluster"
	"github.com/gpupolicy/gpupolicy/e2e/internal/fakenode"
	"github.com/gpupolicy/gpupolicy/e2e/internal/stack"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// TestGuardrailsConfineTheUpgradeStep: with a source: container driver the node agent may
// cordon and uncordon its own node, put and remove the driver-drift NoSchedule taint there,
// delete its own node's driver pod, write Leases in the policy's namespace and evict pods;
// the rendered RBAC and ValidatingAdmissionPolicies deny everything next to that, on a real
// API server (its own: the suite's cluster runs the preinstalled stack's policies).
func TestGuardrailsConfineTheUpgradeStep(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(env.workDir, "upgrade-guardrails")
	c := ownControlPlane(t, dir, cluster.Options{})
	cfg := c.RESTConfig()
	admin := clientFor(t, cfg)

	// The prereqs stage of the upgrade policy: namespace, RBAC, guardrails.
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(strings.Replace(upgradePolicy, "\n  gitops: flux\n", "\n  gitops: argocd\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "rendered")
	if b, err := exec.Command(filepath.Join(env.repoRoot, "bin", "gpupolicy-fn"), "render", "-f", policy, "-o", out).CombinedOutput(); err != nil {
		t.Fatalf("render: %v\n%s", err, b)
	}
	var prereqs []*unstructured.Unstructured
	files, _ := filepath.Glob(filepath.Join(out, "00-prereqs", "*.yaml"))
	for _, f := range files {
		if filepath.Base(f) != "kustomization.yaml" && !strings.Contains(f, "daemonset-") {
			prereqs = append(prereqs, readObjects(t, f)...)
		}
	}
	ap, err := stack.NewApplier(cfg, "e2e")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ap.Apply(ctx, "prereqs", prereqs); err != nil {
		t.Fatal(err)
	}
	const ns = "gpu-system"
	for _, n := range []string{"up-own", "up-other"} {
		if _, err := fakenode.Join(ctx, admin, fakenode.Spec{Name: n, GPU: true}); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(ns, name, node, app string) {
		_, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/name": app}},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "example.com/x:1"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod(ns, "driver-own", "up-own", "gpu-driver-training")
	pod(ns, "driver-default-own", "up-own", "gpu-driver")
	pod(ns, "driver-other", "up-other", "gpu-driver-training")
	pod(ns, "toolkit-own", "up-own", "gpu-container-toolkit")
	pod("ml", "job-own", "up-own", "job")
	pod("ml", "job-evict", "up-own", "job")

	agent := clientFor(t, fakenode.AgentConfig(cfg, ns, "gpu-node-agent", "up-own"))
	featureDiscovery := clientFor(t, fakenode.AgentConfig(cfg, ns, "gpu-feature-discovery", "up-own"))
	drift := `{"key":"` + config.TaintDriverDrift + `","effect":"NoSchedule"}`
	patch := func(cs kubernetes.Interface, node, body string) error {
		_, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	}
	// patchTaints sets node's taints to those it has, plus add (a JSON taint; "" for none) and
	// without the drift taint when dropDrift, with the node's resourceVersion as precondition
	// (retried on conflict), as the agent does: the node lifecycle controller may have put its
	// own taints (not-ready) there, and the guardrails require them kept.
	patchTaints := func(cs kubernetes.Interface, node, add string, dropDrift bool) error {
		for try := 1; ; try++ {
			n, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return err
			}
			var list []string
			for _, tt := range n.Spec.Taints {
				if dropDrift && tt.Key == config.TaintDriverDrift {
					continue
				}
				b, err := json.Marshal(tt)
				if err != nil {
					return err
				}
				list = append(list, string(b))
			}
			if add != "" {
				list = append(list, add)
			}
			err = patch(cs, node, `{"metadata":{"resourceVersion":"`+n.ResourceVersion+`"},"spec":{"taints":[`+strings.Join(list, ",")+`]}}`)
			if !apierrors.IsConflict(err) || try == 10 {
				return err
			}
		}
	}
	del := func(cs kubernetes.Interface, ns, name string) error {
		return cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{})
	}
	lease := func(cs kubernetes.Interface, ns string) error {
		_, err := cs.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "gpu-driver-upgrade-training-0", Namespace: ns}}, metav1.CreateOptions{})
		return err
	}
	// The policies take effect once the API server compiled them.
	eventually(t, 30*time.Second, "the guardrails in force", func() (bool, string) {
		err := patch(agent, "up-other", `{"spec":{"unschedulable":true}}`)
		return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy"), errString(err)
	})
	cases := []struct {
		name    string
		do      func() error
		allowed bool
		// admission: denied by a ValidatingAdmissionPolicy (RBAC allows the verb); else by RBAC.
		admission bool
	}{
		{"cordon own node", func() error { return patch(agent, "up-own", `{"spec":{"unschedulable":true}}`) }, true, false},
		{"uncordon own node", func() error { return patch(agent, "up-own", `{"spec":{"unschedulable":null}}`) }, true, false},
		{"cordon another node", func() error { return patch(agent, "up-other", `{"spec":{"unschedulable":true}}`) }, false, true},
		{"drift taint on own node", func() error { return patchTaints(agent, "up-own", drift, false) }, true, false},
		{"drift taint removed from own node", func() error { return patchTaints(agent, "up-own", "", true) }, true, false},
		{"drift taint NoExecute", func() error {
			return patchTaints(agent, "up-own", `{"key":"`+config.TaintDriverDrift+`","effect":"NoExecute"}`, false)
		}, false, true},
		{"drift taint with a value", func() error {
			return patchTaints(agent, "up-own", `{"key":"`+config.TaintDriverDrift+`","value":"x","effect":"NoSchedule"}`, false)
		}, false, true},
		{"another taint on own node", func() error {
			return patchTaints(agent, "up-own", `{"key":"example.com/evil","effect":"NoSchedule"}`, false)
		}, false, true},
		{"drift taint on another node", func() error { return patchTaints(agent, "up-other", drift, false) }, false, true},
		{"own node providerID", func() error { return patch(agent, "up-own", `{"spec":{"providerID":"kwok://stolen"}}`) }, false, true},
		{"feature discovery cordons its node", func() error { return patch(featureDiscovery, "up-own", `{"spec":{"unschedulable":true}}`) }, false, true},
		{"delete own pool's driver pod on own node", func() error { return del(agent, ns, "driver-own") }, true, false},
		{"delete the default driver pod on own node", func() error { return del(agent, ns, "driver-default-own") }, true, false},
		{"delete a driver pod on another node", func() error { return del(agent, ns, "driver-other") }, false, true},
		{"delete a non-driver pod of the stack on own node", func() error { return del(agent, ns, "toolkit-own") }, false, true},
		{"delete a workload pod on own node", func() error { return del(agent, "ml", "job-own") }, false, false},
		{"write its slot Lease", func() error { return lease(agent, ns) }, true, false},
		{"write a Lease elsewhere", func() error { return lease(agent, "default") }, false, false},
		{"evict a pod on own node (Eviction API)", func() error {
			return agent.PolicyV1().Evictions("ml").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "job-evict", Namespace: "ml"}})
		}, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			switch {
			case tc.allowed && err != nil:
				t.Fatalf("denied: %v", err)
			case !tc.allowed && err == nil:
				t.Fatal("allowed")
			case !tc.allowed && tc.admission && !strings.Contains(err.Error(), "ValidatingAdmissionPolicy"):
				t.Fatalf("denied, but not by the guardrails: %v", err)
			case !tc.allowed && !tc.admission && !strings.Contains(err.Error(), "forbidden"):
				t.Fatalf("denied, but not by RBAC: %v", err)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return "allowed"
	}
	return err.Error()
}
