// Package audit is the privilege report a person reads before approving the GPU stack: for
// every container of every rendered workload, whether it is privileged, which host namespaces
// and host paths it gets (read-only or read-write), its capabilities and runtime class, what its
// service account may do through RBAC, and which host files it writes. It works on rendered
// objects only, so it reports what the cluster will actually run, whether they came from a
// policy (rendered here) or from a committed tree.
package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kjson "sigs.k8s.io/json"
)

// Report is the audit of one rendered tree.
type Report struct {
	Workloads []Workload `json:"workloads"`
	// OtherSubjects are service accounts that hold RBAC but run no rendered workload.
	OtherSubjects []Subject `json:"otherSubjects,omitempty"`
	// Namespaces are the rendered namespaces and their Pod Security levels.
	Namespaces []Namespace `json:"namespaces,omitempty"`
	// AdmissionPolicies are the ValidatingAdmissionPolicies that confine the workloads.
	AdmissionPolicies []AdmissionPolicy `json:"admissionPolicies,omitempty"`
}

// Namespace is a rendered namespace and the Pod Security Admission labels that decide which
// pods it admits (enforce) and reports (audit, warn).
type Namespace struct {
	Name        string            `json:"name"`
	PodSecurity map[string]string `json:"podSecurity,omitempty"` // mode -> level
}

// AdmissionPolicy is a ValidatingAdmissionPolicy and what each of its validations enforces.
type AdmissionPolicy struct {
	Name          string   `json:"name"`
	FailurePolicy string   `json:"failurePolicy,omitempty"`
	Rules         []string `json:"rules"` // the validations' messages
}

// Workload is one pod-creating object and what its pods may do.
type Workload struct {
	Kind           string      `json:"kind"`
	Namespace      string      `json:"namespace"`
	Name           string      `json:"name"`
	ServiceAccount string      `json:"serviceAccount"`
	Token          bool        `json:"serviceAccountToken"` // the token is mounted, so RBAC applies
	HostPID        bool        `json:"hostPID"`
	HostIPC        bool        `json:"hostIPC"`
	HostNetwork    bool        `json:"hostNetwork"`
	RuntimeClass   string      `json:"runtimeClassName,omitempty"`
	NodeSelector   []string    `json:"nodeSelector,omitempty"` // key=value and key In [..] from affinity
	RBAC           []Rule      `json:"rbac"`
	Containers     []Container `json:"containers"`
}

// Container is the privilege of one container.
type Container struct {
	Name                     string     `json:"name"`
	Init                     bool       `json:"init,omitempty"`
	Image                    string     `json:"image"`
	Privileged               bool       `json:"privileged"`
	AllowPrivilegeEscalation bool       `json:"allowPrivilegeEscalation"`
	RunAsUser                *int64     `json:"runAsUser,omitempty"`
	RunAsNonRoot             bool       `json:"runAsNonRoot"`
	ReadOnlyRootFilesystem   bool       `json:"readOnlyRootFilesystem"`
	CapabilitiesAdd          []string   `json:"capabilitiesAdd,omitempty"`
	CapabilitiesDrop         []string   `json:"capabilitiesDrop,omitempty"`
	HostPaths                []HostPath `json:"hostPaths,omitempty"`
	HostWrites               []Write    `json:"hostWrites,omitempty"`
}

// HostPath is one host directory or file mounted into a container.
type HostPath struct {
	Path      string `json:"path"`
	MountPath string `json:"mountPath"`
	ReadOnly  bool   `json:"readOnly"`
	Type      string `json:"type,omitempty"`
}

// Write is a host file or directory the container changes, and why.
type Write struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Subject is a service account with RBAC and no rendered workload.
type Subject struct {
	ServiceAccount string `json:"serviceAccount"`
	RBAC           []Rule `json:"rbac"`
}

// Build audits rendered objects. Objects of kinds the audit does not read pass silently;
// a workload or RBAC object that does not decode into its k8s.io/api type is an error.
func Build(objs []*unstructured.Unstructured) (*Report, error) {
	idx, err := indexObjects(objs)
	if err != nil {
		return nil, err
	}
	r := &Report{}
	used := map[string]bool{}
	for _, w := range idx.workloads {
		wl := auditWorkload(w, idx)
		used[wl.Namespace+"/"+wl.ServiceAccount] = true
		r.Workloads = append(r.Workloads, wl)
	}
	for _, sa := range idx.subjects() {
		if !used[sa] {
			r.OtherSubjects = append(r.OtherSubjects, Subject{ServiceAccount: sa, RBAC: idx.rules(sa)})
		}
	}
	r.AdmissionPolicies = idx.admissionPolicies
	r.Namespaces = idx.namespaces
	return r, nil
}

// workload is a decoded pod-creating object.
type workload struct {
	kind, namespace, name string
	pod                   corev1.PodSpec
}

func decodeWorkload(u *unstructured.Unstructured) (*workload, error) {
	w := &workload{kind: u.GetKind(), namespace: u.GetNamespace(), name: u.GetName()}
	var err error
	switch u.GetKind() {
	case "DaemonSet":
		var ds appsv1.DaemonSet
		err = fromUnstructured(u, &ds)
		w.pod = ds.Spec.Template.Spec
	case "Deployment":
		var d appsv1.Deployment
		err = fromUnstructured(u, &d)
		w.pod = d.Spec.Template.Spec
	case "StatefulSet":
		var s appsv1.StatefulSet
		err = fromUnstructured(u, &s)
		w.pod = s.Spec.Template.Spec
	case "Pod":
		var p corev1.Pod
		err = fromUnstructured(u, &p)
		w.pod = p.Spec
	default:
		return nil, nil
	}
	return w, err
}

// fromUnstructured decodes a rendered object into its k8s.io/api type. An unknown or
// misspelled field (case-sensitive, as the API server reads it) is an error: the report would
// otherwise miss what the cluster is asked to run. It goes through JSON with sigs.k8s.io/json
// rather than runtime.DefaultUnstructuredConverter, whose first call builds megabytes of
// field caches: ~10 ms of every `gpupolicy-fn render -o` process, which writes AUDIT.md.
func fromUnstructured(u *unstructured.Unstructured, into any) error {
	data, err := json.Marshal(u.Object)
	if err == nil {
		var strict []error
		strict, err = kjson.UnmarshalStrict(data, into, kjson.DisallowUnknownFields)
		if err == nil && len(strict) > 0 {
			err = errors.Join(strict...)
		}
	}
	if err != nil {
		return fmt.Errorf("%s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

func auditWorkload(w *workload, idx *index) Workload {
	ps := &w.pod
	sa := ps.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	wl := Workload{
		Kind: w.kind, Namespace: w.namespace, Name: w.name, ServiceAccount: sa,
		Token:   ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken,
		HostPID: ps.HostPID, HostIPC: ps.HostIPC, HostNetwork: ps.HostNetwork,
		NodeSelector: nodeSelection(ps),
		RBAC:         idx.rules(w.namespace + "/" + sa),
	}
	if ps.RuntimeClassName != nil {
		wl.RuntimeClass = *ps.RuntimeClassName
	}
	for i := range ps.InitContainers {
		wl.Containers = append(wl.Containers, auditContainer(&ps.InitContainers[i], true, ps, idx))
	}
	for i := range ps.Containers {
		wl.Containers = append(wl.Containers, auditContainer(&ps.Containers[i], false, ps, idx))
	}
	return wl
}

func auditContainer(c *corev1.Container, init bool, ps *corev1.PodSpec, idx *index) Container {
	out := Container{Name: c.Name, Init: init, Image: c.Image, AllowPrivilegeEscalation: true}
	if psc := ps.SecurityContext; psc != nil {
		out.RunAsUser = psc.RunAsUser
		out.RunAsNonRoot = psc.RunAsNonRoot != nil && *psc.RunAsNonRoot
	}
	if sc := c.SecurityContext; sc != nil {
		out.Privileged = sc.Privileged != nil && *sc.Privileged
		// Kubernetes forces escalation on for privileged containers and CAP_SYS_ADMIN.
		out.AllowPrivilegeEscalation = sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || out.Privileged
		if sc.RunAsUser != nil {
			out.RunAsUser = sc.RunAsUser
		}
		if sc.RunAsNonRoot != nil {
			out.RunAsNonRoot = *sc.RunAsNonRoot
		}
		out.ReadOnlyRootFilesystem = sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem
		if caps := sc.Capabilities; caps != nil {
			out.CapabilitiesAdd = capNames(caps.Add)
			out.CapabilitiesDrop = capNames(caps.Drop)
		}
	}
	hostVolumes := map[string]*corev1.HostPathVolumeSource{}
	for i := range ps.Volumes {
		if hp := ps.Volumes[i].HostPath; hp != nil {
			hostVolumes[ps.Volumes[i].Name] = hp
		}
	}
	for _, m := range c.VolumeMounts {
		hp, ok := hostVolumes[m.Name]
		if !ok {
			continue
		}
		h := HostPath{Path: joinHost(hp.Path, m.SubPath), MountPath: m.MountPath, ReadOnly: m.ReadOnly}
		if hp.Type != nil {
			h.Type = string(*hp.Type)
		}
		out.HostPaths = append(out.HostPaths, h)
	}
	out.HostWrites = hostWrites(c, out, idx)
	return out
}

func capNames(cs []corev1.Capability) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = string(c)
	}
	sort.Strings(out)
	return out
}

// nodeSelection lists where the pods run: nodeSelector and required node affinity terms.
func nodeSelection(ps *corev1.PodSpec) []string {
	var out []string
	for k, v := range ps.NodeSelector {
		out = append(out, k+"="+v)
	}
	if a := ps.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, e := range t.MatchExpressions {
				out = append(out, fmt.Sprintf("%s %s %v", e.Key, e.Operator, e.Values))
			}
		}
	}
	sort.Strings(out)
	return out
}
