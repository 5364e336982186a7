package e2e

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpupolicy/gpupolicy/e2e/internal/fakenode"
	"github.com/gpupolicy/gpupolicy/plugin/agent/discover"
	"github.com/gpupolicy/gpupolicy/plugin/agent/discover/discovertest"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// TestGuardrailsConfineTheAgent plays the node agent's identity (its ServiceAccount plus the
// node-name claim a token bound to a pod on that node carries) and checks what the rendered
// ValidatingAdmissionPolicies let it change: its own node's nvidia.com/ labels and, through
// nodes/status, its own node's GPUStackReady condition, and nothing else.
func TestGuardrailsConfineTheAgent(t *testing.T) {
	d := deployed(t)
	// No host is added for these nodes, so no agent of the fleet writes to them meanwhile.
	joinNode(t, fakenode.Spec{Name: "guard-own", GPU: true})
	joinNode(t, fakenode.Spec{Name: "guard-other", GPU: true})
	sa := d.agentDS.Spec.Template.Spec.ServiceAccountName
	agent := clientFor(t, fakenode.AgentConfig(env.cfg, d.ns, sa, "guard-own"))
	noClaim := fakenode.AgentConfig(env.cfg, d.ns, sa, "guard-own")
	noClaim.Impersonate.Extra = nil
	agentWithoutClaim := clientFor(t, noClaim)

	stackCondition := func(status string) string {
		return `{"status":{"conditions":[{"type":"` + config.ConditionGPUStackReady + `","status":"` + status + `","reason":"StackReady","message":"e2e"}]}}`
	}
	cases := []struct {
		name    string
		client  kubernetes.Interface
		node    string
		patch   string
		allowed bool
		status  bool // a strategic merge patch of nodes/status, as the agent writes its condition
	}{
		{"own node, nvidia.com/ gate label", agent, "guard-own",
			`{"metadata":{"labels":{"` + config.LabelDeployDriver + `":"true"}}}`, true, false},
		{"own node, nvidia.com/ label removed", agent, "guard-own",
			`{"metadata":{"labels":{"` + config.LabelDeployDriver + `":null}}}`, true, false},
		{"own node, gate-status annotation", agent, "guard-own",
			`{"metadata":{"annotations":{"` + config.AnnotationGateStatus + `":"{}"}}}`, true, false},
		{"own node, MIG state label", agent, "guard-own",
			`{"metadata":{"labels":{"` + config.LabelMIGConfigState + `":"success"}}}`, true, false},
		{"own node, MIG layout choice (a person's label)", agent, "guard-own",
			`{"metadata":{"labels":{"` + config.LabelMIGConfig + `":"all-1g.10gb"}}}`, false, false},
		{"another node, nvidia.com/ label", agent, "guard-other",
			`{"metadata":{"labels":{"` + config.LabelDeployDriver + `":"true"}}}`, false, false},
		{"own node, label outside nvidia.com/", agent, "guard-own",
			`{"metadata":{"labels":{"pool":"stolen"}}}`, false, false},
		{"own node, existing non-nvidia label removed", agent, "guard-own",
			`{"metadata":{"labels":{"kubernetes.io/os":null}}}`, false, false},
		{"own node, taint", agent, "guard-own",
			`{"spec":{"taints":[{"key":"nvidia.com/gpu","value":"broken","effect":"NoSchedule"}]}}`, false, false},
		{"own node, cordon (spec.unschedulable)", agent, "guard-own",
			`{"spec":{"unschedulable":true}}`, false, false},
		{"own node without the node-name claim", agentWithoutClaim, "guard-own",
			`{"metadata":{"labels":{"` + config.LabelDeployDriver + `":"true"}}}`, false, false},
		{"own node status, GPUStackReady added", agent, "guard-own", stackCondition("False"), true, true},
		{"own node status, GPUStackReady changed", agent, "guard-own", stackCondition("True"), true, true},
		{"own node status, GPUStackReady removed", agent, "guard-own",
			`{"status":{"conditions":[{"type":"` + config.ConditionGPUStackReady + `","$patch":"delete"}]}}`, true, true},
		{"another node status, GPUStackReady", agent, "guard-other", stackCondition("True"), false, true},
		{"own node status, the kubelet's Ready condition", agent, "guard-own",
			`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Stolen","message":"e2e"}]}}`, false, true},
		{"own node status, GPUStackReady and the Ready condition at once", agent, "guard-own",
			`{"status":{"conditions":[{"type":"` + config.ConditionGPUStackReady + `","status":"True"},{"type":"Ready","status":"False","reason":"Stolen"}]}}`, false, true},
		{"own node status, capacity", agent, "guard-own",
			`{"status":{"capacity":{"nvidia.com/gpu":"64"}}}`, false, true},
		{"own node status, addresses", agent, "guard-own",
			`{"status":{"addresses":[{"type":"InternalIP","address":"10.99.99.99"}]}}`, false, true},
		{"own node status without the node-name claim", agentWithoutClaim, "guard-own", stackCondition("True"), false, true},
		// The policies confine the agent only: a person (admin) still manages nodes.
		{"admin, label outside nvidia.com/", env.cs, "guard-own",
			`{"metadata":{"labels":{"team":"ml"}}}`, true, false},
		{"admin, MIG layout choice", env.cs, "guard-own",
			`{"metadata":{"labels":{"` + config.LabelMIGConfig + `":"all-1g.10gb"}}}`, true, false},
		{"own node, a person's MIG layout choice removed", agent, "guard-own",
			`{"metadata":{"labels":{"` + config.LabelMIGConfig + `":null}}}`, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := nodeLabels(t, c.node)
			pt, sub := types.MergePatchType, []string(nil)
			if c.status {
				pt, sub = types.StrategicMergePatchType, []string{"status"}
			}
			_, err := c.client.CoreV1().Nodes().Patch(context.Background(), c.node, pt, []byte(c.patch), metav1.PatchOptions{}, sub...)
			switch {
			case c.allowed && err != nil:
				t.Fatalf("patch %s denied: %v", c.patch, err)
			case c.allowed && c.status:
				// Allowed means written: the condition is there unless the patch deleted it.
				n, err := env.cs.CoreV1().Nodes().Get(context.Background(), c.node, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				has := false
				for _, cond := range n.Status.Conditions {
					has = has || cond.Type == config.ConditionGPUStackReady
				}
				if want := !strings.Contains(c.patch, "$patch"); has != want {
					t.Fatalf("patch %s allowed, but %s present=%v", c.patch, config.ConditionGPUStackReady, has)
				}
			case !c.allowed && err == nil:
				t.Fatalf("patch %s allowed; labels before %v, after %v", c.patch, before, nodeLabels(t, c.node))
			case !c.allowed:
				// Denied by the admission policy, not by RBAC: RBAC grants node patch, the policy
				// narrows it.
				if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
					t.Fatalf("patch %s denied, but not by a ValidatingAdmissionPolicy: %v", c.patch, err)
				}
				t.Logf("denied as expected: %v", err)
			}
		})
	}
}

// patchCase is one node patch as some identity, and whether the guardrails let it through.
type patchCase struct {
	name    string
	client  kubernetes.Interface
	node    string
	patch   string
	allowed bool
}

// checkPatches sends each patch in order (each starts from the node the previous left) and
// checks that a denial comes from a ValidatingAdmissionPolicy, not RBAC: RBAC grants node
// patch, the policy narrows it.
func checkPatches(t *testing.T, cases []patchCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := nodeLabels(t, c.node)
			_, err := c.client.CoreV1().Nodes().Patch(context.Background(), c.node, types.MergePatchType, []byte(c.patch), metav1.PatchOptions{})
			switch {
			case c.allowed && err != nil:
				t.Fatalf("patch %s denied: %v", c.patch, err)
			case !c.allowed && err == nil:
				t.Fatalf("patch %s allowed; labels before %v, after %v", c.patch, before, nodeLabels(t, c.node))
			case !c.allowed:
				if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
					t.Fatalf("patch %s denied, but not by a ValidatingAdmissionPolicy: %v", c.patch, err)
				}
				t.Logf("denied as expected: %v", err)
			}
		})
	}
}

func clientFor(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestGuardrailsConfineDiscovery plays gpu-discovery's identity: on its own node it may add
// nvidia.com/gpu.present=true where the label is absent, and nothing else. The real
// discovery program, reading a fake sysfs with one GPU, passes them on its node and keeps a
// person's "false" on another.
func TestGuardrailsConfineDiscovery(t *testing.T) {
	d := deployed(t)
	joinNode(t, fakenode.Spec{Name: "disc-own"})
	joinNode(t, fakenode.Spec{Name: "disc-other"})
	joinNode(t, fakenode.Spec{Name: "disc-optout", Labels: map[string]string{config.LabelGPUPresent: "false"}})
	const sa = "gpu-discovery"
	disc := clientFor(t, fakenode.AgentConfig(env.cfg, d.ns, sa, "disc-own"))
	discOnOptOut := clientFor(t, fakenode.AgentConfig(env.cfg, d.ns, sa, "disc-optout"))
	present := func(v string) string { return `{"metadata":{"labels":{"` + config.LabelGPUPresent + `":` + v + `}}}` }

	// In order: each case starts from the node the previous ones left.
	cases := []patchCase{
		{"another node, gpu.present added", disc, "disc-other", present(`"true"`), false},
		{"own node, gpu.present=false added", disc, "disc-own", present(`"false"`), false},
		{"own node, another nvidia.com/ label", disc, "disc-own",
			`{"metadata":{"labels":{"` + config.LabelDeployDriver + `":"true"}}}`, false},
		{"own node, gpu.present=true and another nvidia.com/ label", disc, "disc-own",
			`{"metadata":{"labels":{"` + config.LabelGPUPresent + `":"true","` + config.LabelDeployDriver + `":"true"}}}`, false},
		{"own node, nvidia.com/ annotation", disc, "disc-own",
			`{"metadata":{"annotations":{"` + config.AnnotationGateStatus + `":"{}"}}}`, false},
		{"own node, taint", disc, "disc-own",
			`{"spec":{"taints":[{"key":"nvidia.com/gpu","value":"x","effect":"NoSchedule"}]}}`, false},
		{"own node, gpu.present=true added", disc, "disc-own", present(`"true"`), true},
		{"own node, gpu.present removed", disc, "disc-own", present(`null`), false},
		{"own node, gpu.present turned false", disc, "disc-own", present(`"false"`), false},
		{"opt-out node, a person's false overwritten", discOnOptOut, "disc-optout", present(`"true"`), false},
	}
	checkPatches(t, cases)

	t.Run("the discovery program through the guardrails", func(t *testing.T) {
		sysfs := discovertest.New(t)
		sysfs.Add("0000:3b:00.0", "0x10de", "0x030200")
		joinNode(t, fakenode.Spec{Name: "disc-program"})
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		for _, n := range []struct {
			node, want string
		}{{"disc-program", "true"}, {"disc-optout", "false"}} {
			r := &discover.Reconciler{Client: clientFor(t, fakenode.AgentConfig(env.cfg, d.ns, sa, n.node)), Node: n.node, HostRoot: sysfs.Root, Log: log}
			if _, err := r.Reconcile(context.Background()); err != nil {
				t.Fatalf("%s: %v", n.node, err)
			}
			if got := nodeLabels(t, n.node)[config.LabelGPUPresent]; got != n.want {
				t.Fatalf("%s: %s=%q, want %q", n.node, config.LabelGPUPresent, got, n.want)
			}
		}
	})
}
