// Package doctortest adapts a client-go clientset to doctor.Cluster and a dynamic client to
// doctor.Objects, so tests diagnose over client-go's fakes (unit tests) or a real clientset
// (e2e) while bin/gpupolicy-fn, which reads over plain HTTPS (fn/internal/kubeclient), does
// not link client-go. Only tests import this package.
//
// It does not import doctor (doctor's own tests use it); *Clientset satisfies doctor.Cluster by
// its method set, which doctor's tests assert.
package doctortest

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
)

// Clientset is a doctor.Cluster over a kubernetes.Interface.
type Clientset struct {
	cs kubernetes.Interface
}

// FromClientset returns the doctor.Cluster that reads through cs.
func FromClientset(cs kubernetes.Interface) *Clientset { return &Clientset{cs: cs} }

// ConfigMap gets a ConfigMap.
func (c *Clientset) ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	return c.cs.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
}

// Nodes lists the nodes.
func (c *Clientset) Nodes(ctx context.Context) ([]corev1.Node, error) {
	list, err := c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// Pods lists the pods of every namespace.
func (c *Clientset) Pods(ctx context.Context) ([]corev1.Pod, error) {
	list, err := c.cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// Events lists the events of namespace that match fieldSelector.
func (c *Clientset) Events(ctx context.Context, namespace, fieldSelector string) ([]corev1.Event, error) {
	list, err := c.cs.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: fieldSelector})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// RuntimeClass gets a RuntimeClass.
func (c *Clientset) RuntimeClass(ctx context.Context, name string) (*nodev1.RuntimeClass, error) {
	return c.cs.NodeV1().RuntimeClasses().Get(ctx, name, metav1.GetOptions{})
}

// ResourceClaims lists the ResourceClaims of every namespace.
func (c *Clientset) ResourceClaims(ctx context.Context) ([]resourcev1.ResourceClaim, error) {
	list, err := c.cs.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// ResourceSlices lists every ResourceSlice.
func (c *Clientset) ResourceSlices(ctx context.Context) ([]resourcev1.ResourceSlice, error) {
	list, err := c.cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// DeviceClass gets a DeviceClass.
func (c *Clientset) DeviceClass(ctx context.Context, name string) (*resourcev1.DeviceClass, error) {
	return c.cs.ResourceV1().DeviceClasses().Get(ctx, name, metav1.GetOptions{})
}

// APIResources is the discovery document of one group version; NotFound when not served.
func (c *Clientset) APIResources(ctx context.Context, groupVersion string) (*metav1.APIResourceList, error) {
	return c.cs.Discovery().ServerResourcesForGroupVersionWithContext(ctx, groupVersion)
}

// Dynamic is a doctor.Objects over a dynamic.Interface (client-go's fake in unit tests).
type Dynamic struct {
	client dynamic.Interface
}

// FromDynamic returns the doctor.Objects that reads through client.
func FromDynamic(client dynamic.Interface) *Dynamic { return &Dynamic{client: client} }

// FakeDynamic returns the doctor.Objects over client-go's fake dynamic client holding objs,
// with the list kinds doctor lists that no scheme here registers (the GPU Operator's
// ClusterPolicy), so a fake cluster without them lists none instead of panicking.
func FakeDynamic(objs ...runtime.Object) *Dynamic {
	return FromDynamic(dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{
			{Group: "nvidia.com", Version: "v1", Resource: "clusterpolicies"}: "ClusterPolicyList",
		}, objs...))
}

// List lists the objects of a cluster-scoped kind.
func (d *Dynamic) List(ctx context.Context, gvr schema.GroupVersionResource) ([]unstructured.Unstructured, error) {
	list, err := d.client.Resource(gvr).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// Get reads one object; namespace "" for cluster-scoped ones.
func (d *Dynamic) Get(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (*unstructured.Unstructured, error) {
	if namespace == "" {
		return d.client.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
	}
	return d.client.Resource(gvr).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
}
