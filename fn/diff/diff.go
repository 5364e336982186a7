package diff

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/fn/audit"
	"github.com/gpupolicy/gpupolicy/fn/render"
	"github.com/gpupolicy/gpupolicy/fn/source"
	"github.com/gpupolicy/gpupolicy/fn/validate"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// Report is what a change moves.
type Report struct {
	Base string `json:"base"`
	Head string `json:"head"`
	// Summary is one line a pull request comment can lead with.
	Summary string `json:"summary"`
	// Findings drive --fail-on: the upgrade window, added privileges and RBAC, and the head
	// policy's own warnings.
	Findings []Finding `json:"findings"`
	// Versions has every tracked version, moved or not, so a reviewer sees the whole stack;
	// "" is unknown (a rendered tree does not record the Kubernetes version).
	Versions   []ValueChange `json:"versions"`
	Objects    ObjectChanges `json:"objects"`
	Images     []ValueChange `json:"images"`
	Privileges []SetChange   `json:"privileges"`
	Gates      []SetChange   `json:"gates"`
	RBAC       []SetChange   `json:"rbac"`
	Guardrails []SetChange   `json:"guardrails"`
	DropIn     string        `json:"containerdDropInDiff,omitempty"`
	// MIGLayouts is the unified diff of the node pools' MIG layouts (ConfigMap gpu-mig-config),
	// which the MIG step applies to every node of a pool: a change there repartitions GPUs.
	MIGLayouts string `json:"migLayoutsDiff,omitempty"`
}

// Finding is a reviewer-facing verdict on the change.
type Finding struct {
	Severity validate.Severity `json:"severity"`
	Message  string            `json:"message"`
}

// ValueChange is one value that moved ("" = absent).
type ValueChange struct {
	Name string `json:"name"`
	From string `json:"from"`
	To   string `json:"to"`
}

// SetChange is what was added to and removed from one subject's set of facts.
type SetChange struct {
	Subject string   `json:"subject"`
	Added   []string `json:"added,omitempty"`
	Removed []string `json:"removed,omitempty"`
}

// ObjectChanges lists rendered objects by "Kind namespace/name"; a changed object says which
// of its fields moved, and Shared lists once the changes that many objects make alike.
type ObjectChanges struct {
	Added   []string       `json:"added,omitempty"`
	Removed []string       `json:"removed,omitempty"`
	Changed []ObjectChange `json:"changed,omitempty"`
	Shared  []SharedChange `json:"shared,omitempty"`
}

// Versions the report tracks. The first five are the upgrade-window dimensions, in the order
// the version matrix depends on them; the others change how the stack is applied and gated.
const (
	VersionKubernetes = "kubernetesVersion"
	VersionDriver     = "driver"
	VersionCUDA       = "cuda"
	VersionToolkit    = "toolkit"
	VersionGPUPolicy  = "gpupolicy image"
	VersionContainerd = "containerd"
	VersionEnforce    = "driver enforce"
	VersionGitOps     = "gitops"
	// poolDriverPrefix begins the version of a node pool's own driver: "driver (pool training)".
	poolDriverPrefix = "driver (pool "
)

var (
	windowOrder  = []string{VersionKubernetes, VersionDriver, VersionCUDA, VersionToolkit, VersionGPUPolicy}
	versionOrder = append(slices.Clone(windowOrder), VersionContainerd, VersionEnforce, VersionGitOps)
)

// Compare computes what moves from base to head.
func Compare(base, head *source.Input) (*Report, error) {
	ba, err := audit.Build(base.Objects)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", base.Path, err)
	}
	ha, err := audit.Build(head.Objects)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", head.Path, err)
	}
	r := &Report{Base: base.Path, Head: head.Path}
	// A version only one side records (a rendered tree has no kubernetesVersion) is unknown,
	// not changed; a container only one side has is an image added or removed.
	// Compare like with like: the policies when both inputs are policies (they also know the
	// Kubernetes version), otherwise what the rendered objects record.
	both := base.Policy != nil && head.Policy != nil
	bv, hv := versionsOf(base, both), versionsOf(head, both)
	for _, k := range versionOrder {
		r.Versions = append(r.Versions, ValueChange{Name: k, From: bv[k], To: hv[k]})
		if k == VersionDriver {
			// Then each node pool's own driver, right under the policy's.
			for _, pk := range unionKeys(bv, hv) {
				if strings.HasPrefix(pk, poolDriverPrefix) {
					r.Versions = append(r.Versions, ValueChange{Name: pk, From: bv[pk], To: hv[pk]})
				}
			}
		}
	}
	r.Objects = compareObjects(base.Objects, head.Objects)
	bi, hi := imagesOf(ba), imagesOf(ha)
	r.Images = changedValues(bi, hi)
	r.Privileges = compareSets(privilegesOf(ba), privilegesOf(ha))
	r.Gates = compareSets(gatesOf(ba, base.Objects), gatesOf(ha, head.Objects))
	r.RBAC = compareSets(rbacOf(ba), rbacOf(ha))
	r.Guardrails = compareSets(guardrailsOf(ba), guardrailsOf(ha))
	r.DropIn = Unified(dropInOf(base.Objects), dropInOf(head.Objects), "base/"+config.DropInFile, "head/"+config.DropInFile)
	r.MIGLayouts = Unified(migLayoutsOf(base.Objects), migLayoutsOf(head.Objects), "base/"+config.MIGConfigMap, "head/"+config.MIGConfigMap)
	r.findings(head)
	r.allocationFindings(ba, ha)
	r.Summary = r.summary()
	return r, nil
}

// Moved lists the tracked versions that both sides know and that differ.
func (r *Report) Moved() []ValueChange {
	var out []ValueChange
	for _, v := range r.Versions {
		if v.From != v.To && v.From != "" && v.To != "" {
			out = append(out, v)
		}
	}
	return out
}

func (r *Report) findings(head *source.Input) {
	var window []string
	driverMoved := false
	for _, v := range r.Moved() {
		isDriver := v.Name == VersionDriver || strings.HasPrefix(v.Name, poolDriverPrefix)
		if slices.Contains(windowOrder, v.Name) || isDriver {
			// Drivers of several pools are one kind of move: count the first only.
			if isDriver && driverMoved {
				window[len(window)-1] += fmt.Sprintf(", %s %s → %s", v.Name, v.From, v.To)
				continue
			}
			driverMoved = driverMoved || isDriver
			window = append(window, fmt.Sprintf("%s %s → %s", v.Name, v.From, v.To))
		}
	}
	if len(window) > 1 {
		r.add(validate.SeverityWarning, "upgrade window: this change moves %d of driver, CUDA, toolkit, gpupolicy image and kubernetesVersion at once (%s); ship them as separate changes so a failure points at one",
			len(window), strings.Join(window, ", "))
	}
	for _, c := range r.Privileges {
		if len(c.Added) > 0 {
			r.add(validate.SeverityWarning, "privileges added to %s: %s", c.Subject, strings.Join(c.Added, "; "))
		}
	}
	for _, c := range r.RBAC {
		if len(c.Added) > 0 {
			r.add(validate.SeverityWarning, "RBAC added for %s: %s", c.Subject, strings.Join(c.Added, "; "))
		}
	}
	for _, c := range r.Guardrails {
		if len(c.Removed) > 0 {
			r.add(validate.SeverityWarning, "guardrails loosened: %s no longer enforces: %s", c.Subject, strings.Join(c.Removed, "; "))
		}
	}
	for _, res := range head.Results {
		if res.Severity != validate.SeverityInfo {
			r.add(res.Severity, "head policy %s: %s", res.Field, res.Message)
		}
	}
}

func (r *Report) add(sev validate.Severity, format string, args ...any) {
	r.Findings = append(r.Findings, Finding{Severity: sev, Message: fmt.Sprintf(format, args...)})
}

// Fails reports whether a finding reaches the threshold ("warning" or "error"; "" never).
func (r *Report) Fails(threshold string) bool { return FindingsFail(r.Findings, threshold) }

// FindingsFail reports whether a finding reaches threshold ("warning" or "error"; "" never
// fails), the rule of every report command's --fail-on.
func FindingsFail(findings []Finding, threshold string) bool {
	for _, f := range findings {
		if f.Severity == validate.SeverityError || (threshold == "warning" && f.Severity == validate.SeverityWarning) {
			return threshold != ""
		}
	}
	return false
}

// Threshold turns a --fail-on value into Fails' threshold: "" means "error", "none" never fails.
func Threshold(failOn string) string {
	if failOn = cmp.Or(failOn, "error"); failOn == "none" {
		return ""
	}
	return failOn
}

// versionsOf reads the upgrade-window versions from the policy, or from the rendered agent
// configuration and the node agent's image (a rendered tree does not record the Kubernetes
// version).
func versionsOf(in *source.Input, fromPolicy bool) map[string]string {
	if p := in.Policy; p != nil && fromPolicy {
		out := map[string]string{
			VersionKubernetes: p.Spec.KubernetesVersion, VersionDriver: p.Spec.Driver.Version,
			VersionCUDA: p.Spec.CUDA.Version, VersionToolkit: p.Spec.Toolkit.Version, VersionGPUPolicy: p.Spec.Images.GPUPolicy,
			VersionContainerd: p.Spec.ContainerRuntime.Version, VersionEnforce: p.Spec.Driver.Enforce, VersionGitOps: p.Spec.GitOps,
		}
		for _, np := range p.Spec.DriverPools() {
			d, _ := p.Spec.PoolDriver(np)
			out[poolDriverPrefix+np.Name+")"] = d.Version
		}
		return out
	}
	// The ordering metadata says which engine the tree is for: Argo CD sync waves, Flux
	// Kustomizations, or neither.
	out := map[string]string{VersionGitOps: "none"}
	for _, u := range in.Objects {
		if _, ok := u.GetAnnotations()["argocd.argoproj.io/sync-wave"]; ok {
			out[VersionGitOps] = "argocd"
		}
		if u.GetKind() == "Kustomization" && strings.HasPrefix(u.GetAPIVersion(), "kustomize.toolkit.fluxcd.io/") {
			out[VersionGitOps] = "flux"
		}
	}
	for _, u := range in.Objects {
		switch {
		case u.GetKind() == "ConfigMap" && u.GetName() == config.AgentConfigMap:
			data, _, _ := unstructured.NestedString(u.Object, "data", config.AgentConfigFile)
			var agent config.Agent
			if yaml.Unmarshal([]byte(data), &agent) == nil {
				out[VersionDriver], out[VersionCUDA], out[VersionToolkit] = agent.Driver.Version, agent.CUDAVersion, agent.Toolkit.Version
				out[VersionContainerd], out[VersionEnforce] = agent.ContainerRuntime.Version, agent.Driver.Enforce
				for _, np := range agent.NodePools {
					if np.Driver != nil {
						out[poolDriverPrefix+np.Name+")"] = np.Driver.Version
					}
				}
			}
		case u.GetKind() == "DaemonSet" && u.GetName() == render.NameNodeAgent:
			cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
			if len(cs) > 0 {
				img, _, _ := unstructured.NestedString(cs[0].(map[string]any), "image")
				out[VersionGPUPolicy] = img
			}
		}
	}
	return out
}

// changedValues lists the keys (sorted) whose values differ, a key on one side only included.
func changedValues(a, b map[string]string) []ValueChange {
	out := []ValueChange{}
	for _, k := range unionKeys(a, b) {
		if av, bv := a[k], b[k]; av != bv {
			out = append(out, ValueChange{Name: k, From: av, To: bv})
		}
	}
	return out
}

func unionKeys(a, b map[string]string) []string {
	out := slices.AppendSeq(slices.Collect(maps.Keys(a)), maps.Keys(b))
	slices.Sort(out)
	return slices.Compact(out)
}

func objectKey(u *unstructured.Unstructured) string {
	if ns := u.GetNamespace(); ns != "" {
		return u.GetKind() + " " + ns + "/" + u.GetName()
	}
	return u.GetKind() + " " + u.GetName()
}

func compareObjects(base, head []*unstructured.Unstructured) ObjectChanges {
	bm, hm := map[string]*unstructured.Unstructured{}, map[string]*unstructured.Unstructured{}
	for _, u := range base {
		bm[objectKey(u)] = u
	}
	for _, u := range head {
		hm[objectKey(u)] = u
	}
	var oc ObjectChanges
	var changed, changedConfigMaps []string
	for _, k := range slices.Sorted(maps.Keys(hm)) {
		if b, ok := bm[k]; !ok {
			oc.Added = append(oc.Added, k)
		} else if !sameObject(b, hm[k]) {
			changed = append(changed, k)
			if hm[k].GetKind() == "ConfigMap" {
				changedConfigMaps = append(changedConfigMaps, hm[k].GetNamespace()+"/"+hm[k].GetName())
			}
		}
	}
	for _, k := range changed {
		oc.Changed = append(oc.Changed, changedObject(k, bm[k], hm[k], changedConfigMaps))
	}
	oc.Shared = hoistShared(oc.Changed)
	for _, k := range slices.Sorted(maps.Keys(bm)) {
		if _, ok := hm[k]; !ok {
			oc.Removed = append(oc.Removed, k)
		}
	}
	return oc
}

// sameObject compares by JSON, so an object read from YAML (float64 or int64 numbers) equals
// the same object converted from Go types.
func sameObject(a, b *unstructured.Unstructured) bool {
	ja, errA := json.Marshal(a.Object)
	jb, errB := json.Marshal(b.Object)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:6])
}
