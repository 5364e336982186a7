// Package render expands a defaulted, validated GPUPolicy into every object a cluster needs to
// run GPUs: one file per component, each a pure function of the policy, built from k8s.io/api
// types so every object decodes strictly by construction. Render sorts the objects and applies
// the ordering metadata (order.go); serialize.go turns them into deterministic YAML (written
// by fn/internal/yamlout) and layout.go into the `gpupolicy-fn render -o DIR` tree.
//
// What is rendered, by stage (Argo CD wave):
//
//	prereqs (-1)        Namespace (Pod Security enforce=privileged), one ServiceAccount per
//	                    component, ClusterRole+Binding for the node agent and feature discovery
//	                    (nodes get/list/watch/patch, events), ConfigMaps (containerd drop-in,
//	                    agent config, device plugin config per pool), RuntimeClass (scheduling on
//	                    nvidia.com/gpu.toolkit.ready=true), guardrails (ValidatingAdmissionPolicy +
//	                    Binding), the gpu-node-agent DaemonSet (entry selector only); per
//	                    spec.discovery the gpu-discovery DaemonSet (every Linux node: it sets
//	                    the entry label nvidia.com/gpu.present) or an NFD NodeFeatureRule
//	driver (0)          gpu-driver: validator (preinstalled) or NVIDIA's driver container; OnDelete
//	container-toolkit (1) gpu-container-toolkit: toolkit binaries + reviewed drop-in install
//	device-plugin (2)   gpu-device-plugin and gpu-device-plugin-<pool> (the first excludes the pools);
//	                    gpu-dra-plugin[-<pool>] instead where allocation is dra, with the
//	                    DeviceClasses gpu.nvidia.com and mig.nvidia.com, its RBAC and the
//	                    ResourceSlice guardrails in prereqs
//	observability (3)   gpu-feature-discovery, gpu-exporter + Service, ServiceMonitor, PrometheusRule
//
// Every stage DaemonSet requires the entry selector and its nvidia.com/gpu.deploy.<stage> label
// In [true]; only the containers that write the host are privileged: the toolkit stage's
// toolkit-copy and install, and with driver.source container NVIDIA's driver container.
package render

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// KubeObject is what every rendered object is: a typed k8s.io/api struct with TypeMeta set, or
// an *unstructured.Unstructured for kinds whose Go types live outside k8s.io/api (CRDs).
type KubeObject interface {
	runtime.Object
	metav1.Object
}

// Object is one rendered object and the stage it belongs to.
type Object struct {
	Stage Stage
	// Component names the renderer that made it ("driver", "device-plugin", ...), for
	// audit and diff summaries.
	Component string
	Obj       KubeObject

	// data is Obj as Map makes it, kept by the size check at the end of rendering so the
	// writers (YAML, AppendItems) do not build it a second time. Map itself always builds it
	// afresh, for callers that edit the result.
	data map[string]any
}

// Objects in output order.
type Objects []Object

// Labels every rendered object carries.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelPartOf    = "app.kubernetes.io/part-of"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelComponent = "app.kubernetes.io/component"

	PartOf    = "gpupolicy"
	ManagedBy = "gpupolicy-fn"

	// AnnotationConfigHash on a pod template changes when the ConfigMaps the pods read change,
	// so a DaemonSet rolls out a new configuration instead of running the old one until the
	// next restart.
	AnnotationConfigHash = "gpupolicy.dev/config-sha256"
)

// Names of the per-component objects (DaemonSet, ServiceAccount and RBAC share the name).
const (
	NameNodeAgent = "gpu-node-agent"
	NameDriver    = config.DaemonSetDriver // the stages' DaemonSets are named by the stage table
	// DriverContainer is the container of NVIDIA's driver image (driver.source: container) in
	// the driver stage; a preinstalled driver's stage runs only the validator.
	DriverContainer      = "nvidia-driver"
	NameToolkit          = config.DaemonSetToolkit
	NameDevicePlugin     = config.DaemonSetDevicePlugin
	NameFeatureDiscovery = config.DaemonSetFeatureDiscovery
	NameExporter         = config.DaemonSetExporter
	NameGuardrails       = "gpupolicy-node-guardrails"
	NameDiscovery        = "gpu-discovery"
)

// renderer makes the objects of one component.
type renderer func(c *plan) (Objects, error)

// renderers in the order a reader meets them; the output order comes from sortObjects.
var renderers = []renderer{
	renderNamespace,
	renderRBAC,
	renderConfigMaps,
	renderRuntimeClass,
	renderGuardrails,
	renderDRAGuardrails,
	renderDeviceClasses,
	renderDiscovery,
	renderNodeAgent,
	renderDriver,
	renderToolkit,
	renderMIG,
	renderMPS,
	renderDevicePlugins,
	renderFeatureDiscovery,
	renderExporter,
}

// Render expands p, which must be defaulted (v1alpha1.Default) and free of validation errors,
// into every object, sorted and with the ordering metadata of spec.gitops applied. Rendering
// is pure: the same policy gives the same objects. The few problems only rendering can see
// are returned as v1alpha1.FieldErrors naming the policy field; an object the API server
// would refuse for its size (size.go) is an error naming the object and the limit.
func Render(p *v1alpha1.GPUPolicy) (Objects, error) {
	return RenderContext(context.Background(), p)
}

// RenderContext is Render that stops between components once ctx is done, returning its
// error.
func RenderContext(ctx context.Context, p *v1alpha1.GPUPolicy) (Objects, error) {
	c, err := newPlan(p)
	if err != nil {
		return nil, err
	}
	var out Objects
	for _, r := range renderers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		objs, err := r(c)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	sortObjects(out)
	if err := applyOrdering(p.Spec.GitOps, out); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkSizes(out); err != nil {
		return nil, err
	}
	return out, nil
}

// meta is the ObjectMeta of a rendered object of component name.
func (c *plan) meta(name string, namespaced bool) metav1.ObjectMeta {
	m := metav1.ObjectMeta{Name: name, Labels: c.labels(name)}
	if namespaced {
		m.Namespace = c.ns
	}
	return m
}

// labels are the recommended labels; name is the component's object name.
func (c *plan) labels(name string) map[string]string {
	return map[string]string{
		LabelName:      name,
		LabelPartOf:    PartOf,
		LabelManagedBy: ManagedBy,
		LabelInstance:  c.p.Metadata.Name,
	}
}

func typeMeta(apiVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}

func (o Object) String() string {
	gvk := o.Obj.GetObjectKind().GroupVersionKind()
	if ns := o.Obj.GetNamespace(); ns != "" {
		return fmt.Sprintf("%s %s/%s", gvk.Kind, ns, o.Obj.GetName())
	}
	return fmt.Sprintf("%s %s", gvk.Kind, o.Obj.GetName())
}
