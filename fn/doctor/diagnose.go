package doctor

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// Expected yields the rendered objects of a policy and names their source for messages.
type Expected struct {
	Source  string
	Objects func(ctx context.Context) ([]*unstructured.Unstructured, error)
}

// Objects reads one object of any kind (a namespace of "" for cluster-scoped ones), with a
// NotFound *apierrors.StatusError when it does not exist.
type Objects interface {
	Get(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (*unstructured.Unstructured, error)
	// List lists the objects of a cluster-scoped kind, with a NotFound error when the cluster
	// does not serve it (the GPU Operator's ClusterPolicy).
	List(ctx context.Context, gvr schema.GroupVersionResource) ([]unstructured.Unstructured, error)
}

// Input is what a diagnosis reads. Everything is read-only.
type Input struct {
	Cluster Cluster
	// Objects and Mapper read the rendered objects of any kind; needed only with Expected.
	// A nil Mapper is built from the Cluster's API discovery of the rendered kinds.
	Objects Objects
	Mapper  meta.RESTMapper
	// Expected is the policy's rendered output (-f); nil diagnoses by the agent ConfigMap in
	// Namespace, or by the contract's defaults.
	Expected *Expected
	// Namespace of the rendered objects when Expected is nil ("" = gpu-system).
	Namespace string
	// Node and Pod ("ns/name") narrow the report; empty means every GPU node and failing GPU pod.
	Node string
	Pod  string
	// Server is the API server URL, for messages when it cannot be reached.
	Server string
}

// snapshot is one consistent read of what the diagnoses look at.
type snapshot struct {
	exp          Expectations
	nodes        []corev1.Node
	pods         []corev1.Pod
	runtimeClass *nodev1.RuntimeClass // nil when missing or unreadable
	rcReadable   bool
	inUse        map[string]map[string]int64 // node → resource → requested by its non-terminated pods
	nodeReports  map[string]*NodeReport
	// runtimeClasses caches RuntimeClasses other than the policy's that pods name.
	runtimeClasses map[string]*nodev1.RuntimeClass
	// dra is read when a pod has ResourceClaims (claims.go).
	dra    draView
	report *Report
	in     Input
}

// Diagnose reads the cluster and returns the report. An error means nothing could be said:
// the API server could not be reached, or RBAC forbids listing nodes or pods.
func Diagnose(ctx context.Context, in Input) (*Report, error) {
	s := &snapshot{in: in, report: &Report{Nodes: []NodeReport{}, Pods: []PodReport{}}}
	var rendered []*unstructured.Unstructured
	if in.Expected != nil {
		objs, err := in.Expected.Objects(ctx)
		if err != nil {
			return nil, err
		}
		if s.exp, err = expectationsFromObjects(in.Expected.Source, objs); err != nil {
			return nil, err
		}
		rendered = objs
	} else if err := s.readAgentConfig(ctx); err != nil {
		return nil, err
	}
	s.report.Expectations = s.exp
	if err := s.readCluster(ctx); err != nil {
		return nil, err
	}
	if s.exp.anyDRA() {
		if err := s.readDRA(ctx); err != nil {
			return nil, err
		}
	}
	if err := s.diagnoseNodes(); err != nil {
		return nil, err
	}
	if err := s.diagnoseOperator(ctx); err != nil {
		return nil, err
	}
	if err := s.diagnosePods(ctx); err != nil {
		return nil, err
	}
	if rendered != nil {
		if err := s.compareObjects(ctx, rendered); err != nil {
			return nil, err
		}
	}
	return s.report, nil
}

func (s *snapshot) readErr(verb, resource, ns, name string, err error) *ReadError {
	return &ReadError{Verb: verb, Resource: resource, Namespace: ns, Name: name, Server: s.in.Server, Err: err}
}

// note records a read that failed without stopping the diagnosis; unreachable or unauthorized
// clusters stop it.
func (s *snapshot) note(e *ReadError, consequence string) error {
	if fatalRead(e.Err) {
		return e
	}
	s.report.Notes = append(s.report.Notes, e.Error()+"; "+consequence)
	return nil
}

// readAgentConfig takes the expectations from the agent ConfigMap the policy rendered into the
// cluster, so doctor without -f judges nodes by the same rules as the agent.
func (s *snapshot) readAgentConfig(ctx context.Context) error {
	s.exp = defaultExpectations(s.in.Namespace)
	ns := s.exp.Namespace
	cm, err := s.in.Cluster.ConfigMap(ctx, ns, config.AgentConfigMap)
	switch {
	case apierrors.IsNotFound(err):
		s.report.Notes = append(s.report.Notes, fmt.Sprintf(
			"no ConfigMap %s/%s: judging by the GPUPolicy defaults (pass -f POLICY, or --namespace where the policy is applied)", ns, config.AgentConfigMap))
		return nil
	case err != nil:
		return s.note(s.readErr("get", "configmaps", ns, config.AgentConfigMap, err), "judging by the GPUPolicy defaults")
	}
	if err := s.exp.applyAgentConfig(cm.Data[config.AgentConfigFile]); err != nil {
		return fmt.Errorf("ConfigMap %s/%s in the cluster: %w", ns, config.AgentConfigMap, err)
	}
	s.exp.Source = "configmap " + ns + "/" + config.AgentConfigMap
	return s.readMIGLayouts(ctx)
}

func (s *snapshot) readCluster(ctx context.Context) error {
	nodes, err := s.in.Cluster.Nodes(ctx)
	if err != nil {
		e := s.readErr("list", "nodes", "", "", err)
		e.Essential = true
		return e
	}
	s.nodes = nodes
	sort.Slice(s.nodes, func(i, j int) bool { return s.nodes[i].Name < s.nodes[j].Name })

	pods, err := s.in.Cluster.Pods(ctx)
	if err != nil {
		e := s.readErr("list", "pods", "", "", err)
		e.Essential = true
		return e
	}
	s.pods = pods
	sort.Slice(s.pods, func(i, j int) bool {
		if s.pods[i].Namespace != s.pods[j].Namespace {
			return s.pods[i].Namespace < s.pods[j].Namespace
		}
		return s.pods[i].Name < s.pods[j].Name
	})
	s.inUse = map[string]map[string]int64{}
	for i := range s.pods {
		p := &s.pods[i]
		if p.Spec.NodeName == "" || terminated(p) {
			continue
		}
		if res, n := s.podGPUs(p); n > 0 {
			if s.inUse[p.Spec.NodeName] == nil {
				s.inUse[p.Spec.NodeName] = map[string]int64{}
			}
			s.inUse[p.Spec.NodeName][res] += n
		}
	}

	rc, err := s.in.Cluster.RuntimeClass(ctx, s.exp.RuntimeClassName)
	switch {
	case apierrors.IsNotFound(err):
		s.rcReadable = true
		s.report.Cluster = append(s.report.Cluster, Finding{
			Severity: SeverityError, Check: "runtimeclass-missing",
			Message: fmt.Sprintf("RuntimeClass %q does not exist: pods with runtimeClassName %[1]q are rejected at admission", s.exp.RuntimeClassName),
			Fix:     "apply the rendered RuntimeClass (wave -1 of gpupolicy-fn render), e.g. kubectl apply -f <rendered>/ with the RuntimeClass object",
		})
	case err != nil:
		return s.note(s.readErr("get", "runtimeclasses.node.k8s.io", "", s.exp.RuntimeClassName, err), "the RuntimeClass selector is not checked")
	default:
		s.rcReadable = true
		s.runtimeClass = rc
	}
	return nil
}

// isGPUNode: the policy's entry selector picks it, the agent has touched it, or it advertises GPUs.
func (s *snapshot) isGPUNode(n *corev1.Node) bool {
	if config.MatchesNodeSelector(n.Labels, s.exp.EntrySelector) {
		return true
	}
	for _, g := range config.Gates {
		if _, ok := n.Labels[g.Label]; ok {
			return true
		}
	}
	q, ok := n.Status.Capacity[corev1.ResourceName(s.exp.resourceFor(n.Labels))]
	return ok && !q.IsZero()
}

func terminated(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// podGPUs is the GPU resource the pod asks for and how many; the policy's resource and 0 when
// it asks for none.
func (s *snapshot) podGPUs(p *corev1.Pod) (string, int64) {
	for _, name := range s.exp.resourceNames() {
		if n := podRequest(p, corev1.ResourceName(name)); n > 0 {
			return name, n
		}
	}
	for _, name := range migResources(p) {
		if n := podRequest(p, corev1.ResourceName(name)); n > 0 {
			return name, n
		}
	}
	return s.exp.ResourceName, 0
}

// migResources are the MIG slice resources the pod's containers name, sorted.
func migResources(p *corev1.Pod) []string {
	var names []string
	for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		for _, list := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
			for name := range list {
				if n := string(name); strings.HasPrefix(n, migResourcePrefix) && !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
		}
	}
	slices.Sort(names)
	return names
}

// quantity is the integer value of an extended resource in list, 0 when absent.
func quantity(list corev1.ResourceList, name string) int64 {
	q, ok := list[corev1.ResourceName(name)]
	if !ok {
		return 0
	}
	return q.Value()
}

// podRequest is the pod's effective request of an extended resource: the larger of the sum over
// its app containers and the largest init container, as the scheduler counts it. Extended
// resources may be set as limits only (requests then default to them).
func podRequest(p *corev1.Pod, name corev1.ResourceName) int64 {
	get := func(c corev1.Container) int64 {
		if q, ok := c.Resources.Requests[name]; ok {
			return q.Value()
		}
		if q, ok := c.Resources.Limits[name]; ok {
			return q.Value()
		}
		return 0
	}
	var sum, maxInit int64
	for _, c := range p.Spec.Containers {
		sum += get(c)
	}
	for _, c := range p.Spec.InitContainers {
		if v := get(c); v > maxInit {
			maxInit = v
		}
	}
	return max(sum, maxInit)
}

func splitPodRef(ref string) (string, string, error) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("--pod %q: want NAMESPACE/NAME", ref)
	}
	return ns, name, nil
}
