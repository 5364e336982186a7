package audit

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/internal/fntest"
	"github.com/gpupolicy/gpupolicy/fn/render"
	"github.com/gpupolicy/gpupolicy/fn/source"
	"github.com/gpupolicy/gpupolicy/fn/testing/goldentree"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	goldentree.File(t, filepath.Join("testdata", name), got, *update)
}

// buildReport audits a policy file or rendered tree.
func buildReport(t *testing.T, path string) *Report {
	t.Helper()
	in, err := source.Load(path, validate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Build(in.Objects)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestFixtureGolden(t *testing.T) {
	for _, format := range []string{"md", "json"} {
		code, out, stderr := fntest.Call(Run, Options{Path: "testdata/fixture.yaml", Format: format})
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		golden(t, "fixture."+format, []byte(out))
	}
}

func TestFixtureFacts(t *testing.T) {
	r := buildReport(t, "testdata/fixture.yaml")
	byName := map[string]Workload{}
	for _, w := range r.Workloads {
		byName[w.Name] = w
	}
	agent, tk := byName["gpu-node-agent"], byName["gpu-container-toolkit"]
	if len(agent.RBAC) != 3 || agent.RBAC[0].Scope != "cluster" || agent.RBAC[2].Scope != "gpu-system" || agent.RBAC[2].ResourceNames[0] != "gpu-node-agent" {
		t.Errorf("agent RBAC = %+v", agent.RBAC)
	}
	if !tk.HostPID || tk.Token || len(tk.Containers) != 2 || !tk.Containers[0].Init || !tk.Containers[0].Privileged {
		t.Errorf("toolkit = %+v", tk)
	}
	install := tk.Containers[1]
	if got := install.HostPaths[1].Path; got != "/var/lib/gpupolicy/toolkit-status.json" {
		t.Errorf("subPath mount = %q", got)
	}
	if install.HostWrites[0].Path != "/etc/containerd/gpu.d/99-gpupolicy-nvidia.toml" || !strings.Contains(install.HostWrites[0].Reason, "via signal") {
		t.Errorf("drop-in write must follow the agent config's dropInDir and the restart flag: %+v", install.HostWrites[0])
	}
	if strings.Join(install.CapabilitiesAdd, ",") != "KILL,SYS_ADMIN" || *install.RunAsUser != 0 {
		t.Errorf("install = %+v", install)
	}
	if len(r.OtherSubjects) != 1 || r.OtherSubjects[0].ServiceAccount != "monitoring/prometheus" || !strings.Contains(r.OtherSubjects[0].RBAC[0].GrantedBy, "not in the rendered objects") {
		t.Errorf("other subjects = %+v", r.OtherSubjects)
	}
	if len(r.AdmissionPolicies) != 1 {
		t.Errorf("admission policies = %v", r.AdmissionPolicies)
	}
}

// TestPolicyAndRenderedTreeAgree audits a policy, and the tree `render -o` writes for it (the
// Argo CD layout and the Flux layout): the reports must be identical, and only the driver
// container and toolkit install may be privileged.
func TestPolicyAndRenderedTreeAgree(t *testing.T) {
	code, out, stderr := fntest.Call(Run, Options{Path: "testdata/policy.yaml"})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	golden(t, "policy.md", []byte(out))
	for _, policy := range []string{"testdata/policy.yaml", "../../policies/containerd-2-cdi.yaml", "../../policies/driver-container.yaml"} {
		t.Run(filepath.Base(policy), func(t *testing.T) {
			code, fromPolicy, stderr := fntest.Call(Run, Options{Path: policy})
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			code, fromTree, stderr := fntest.Call(Run, Options{Path: fntest.WriteTree(t, policy)})
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if fromTree != fromPolicy {
				t.Errorf("audit of the rendered tree differs from the audit of the policy")
			}
			r := buildReport(t, policy)
			for _, w := range r.Workloads {
				for _, c := range w.Containers {
					if c.Privileged && w.Name != render.NameDriver && w.Name != render.NameToolkit {
						t.Errorf("%s/%s is privileged; only the driver and toolkit stages may be", w.Name, c.Name)
					}
				}
			}
		})
	}
}

// TestBadInput: the usage errors are fn/cli's (TestAuditUsage).
func TestBadInput(t *testing.T) {
	if code, _, stderr := fntest.Call(Run, Options{Path: "../testdata/invalid/pool-overlapping-selectors/policy.yaml"}); code != 1 || !strings.Contains(stderr, "spec.nodePools[1].nodeSelector") {
		t.Errorf("invalid policy: exit %d, stderr %s", code, stderr)
	}
	if code, _, stderr := fntest.Call(Run, Options{Path: "testdata/does-not-exist"}); code != 1 || stderr == "" {
		t.Errorf("missing file: exit %d", code)
	}
}

// A field the k8s.io/api type does not have is an error, matched case-sensitively as the API
// server does, so a misspelled privilege setting cannot slip past the report.
func TestUnknownFieldIsAnError(t *testing.T) {
	ds := func(podSpec string) string {
		return "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x, namespace: gpu}\nspec:\n  revisionHistoryLimit: 3\n  selector: {matchLabels: {app: x}}\n  template:\n    metadata: {labels: {app: x}}\n    spec: {" + podSpec + "}\n"
	}
	for name, tc := range map[string]struct {
		podSpec, want string
	}{
		"known":      {"hostPID: true, containers: [{name: c, image: i, ports: [{containerPort: 80}]}]", ""},
		"unknown":    {"hostPIDs: true, containers: [{name: c, image: i}]", `unknown field "spec.template.spec.hostPIDs"`},
		"wrong case": {"hostPid: true, containers: [{name: c, image: i}]", `unknown field "spec.template.spec.hostPid"`},
		"wrong type": {"hostPID: yes-please, containers: [{name: c, image: i}]", "DaemonSet gpu/x"},
	} {
		objs, err := source.Decode(name, []byte(ds(tc.podSpec)))
		if err != nil {
			t.Fatal(err)
		}
		r, err := Build(objs)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case tc.want == "" && (len(r.Workloads) != 1 || !r.Workloads[0].HostPID):
			t.Errorf("%s: report %+v", name, r)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
	}
}

// TestDRAPlugin: the DRA plugin's review facts: unprivileged root, its RBAC on ResourceSlices,
// the files it writes (the per-claim CDI specs and the kubelet sockets, following its flags), and
// the ResourceSlice guardrails among the admission policies.
func TestDRAPlugin(t *testing.T) {
	r := buildReport(t, "../render/testdata/dra/policy.yaml")
	var dra *Workload
	for i := range r.Workloads {
		if r.Workloads[i].Name == render.NameDRAPlugin+"-training" {
			dra = &r.Workloads[i]
		}
	}
	if dra == nil {
		t.Fatalf("no %s-training workload in %+v", render.NameDRAPlugin, r.Workloads)
	}
	c := dra.Containers[0]
	if c.Privileged || len(c.CapabilitiesAdd) > 0 || !dra.Token {
		t.Errorf("dra-plugin = %+v", c)
	}
	var writes []string
	for _, w := range c.HostWrites {
		writes = append(writes, w.Path)
	}
	for _, want := range []string{"/var/run/cdi/k8s.gpu.nvidia.com-claim_<claim uid>.json", "/var/lib/kubelet/plugins/gpu.nvidia.com/dra.sock", "/var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock"} {
		if !strings.Contains(strings.Join(writes, " "), want) {
			t.Errorf("host writes %v lack %s", writes, want)
		}
	}
	var rbac []string
	for _, rule := range dra.RBAC {
		rbac = append(rbac, rule.String())
	}
	if !strings.Contains(strings.Join(rbac, "; "), "resourceslices (resource.k8s.io)") {
		t.Errorf("RBAC = %v", rbac)
	}
	var policies []string
	for _, p := range r.AdmissionPolicies {
		policies = append(policies, p.Name)
	}
	if !strings.Contains(strings.Join(policies, " "), render.NameDRAGuardrails) {
		t.Errorf("admission policies %v lack %s", policies, render.NameDRAGuardrails)
	}
}
