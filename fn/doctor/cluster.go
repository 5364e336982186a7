package doctor

import (
	"context"
	"fmt"
	"net/url"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "sigs.k8s.io/json"

	"github.com/gpupolicy/gpupolicy/fn/internal/kubeclient"
)

// Cluster is the typed reads a diagnosis makes of the API server. Errors are what the server
// answered (*apierrors.StatusError for NotFound, Forbidden, ...) or why it could not be reached.
//
// It is doctor's own, and small on purpose: client-go (the typed clientset with its scheme,
// and even clientcmd, rest and dynamic with their feature gates and exec-plugin tables) costs
// every gpupolicy-fn process package initialisation and memory — the KRM function and render
// included — although only doctor reads a cluster. The binary therefore reads over plain
// HTTPS (restCluster over fn/internal/kubeclient); tests adapt a clientset, fake or real,
// with doctortest.FromClientset.
type Cluster interface {
	ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	Nodes(ctx context.Context) ([]corev1.Node, error)
	// Pods lists the pods of every namespace.
	Pods(ctx context.Context) ([]corev1.Pod, error)
	// Events lists the events of namespace that match fieldSelector.
	Events(ctx context.Context, namespace, fieldSelector string) ([]corev1.Event, error)
	RuntimeClass(ctx context.Context, name string) (*nodev1.RuntimeClass, error)
	// ResourceClaims lists the ResourceClaims of every namespace, ResourceSlices every slice
	// and DeviceClass gets one class (resource.k8s.io/v1): read only when a pod has claims.
	ResourceClaims(ctx context.Context) ([]resourcev1.ResourceClaim, error)
	ResourceSlices(ctx context.Context) ([]resourcev1.ResourceSlice, error)
	DeviceClass(ctx context.Context, name string) (*resourcev1.DeviceClass, error)
	// APIResources is the API discovery document of one group version ("v1", "apps/v1"), with
	// a NotFound error when the cluster does not serve it.
	APIResources(ctx context.Context, groupVersion string) (*metav1.APIResourceList, error)
}

// restCluster implements Cluster, and Objects for the -f comparisons, with one GET per read,
// decoding the JSON body straight into the k8s.io/api type as the typed clientset would
// (case-sensitive, integers preserved).
type restCluster struct {
	client *kubeclient.Client
}

var (
	_ Cluster = restCluster{}
	_ Objects = restCluster{}
)

// forConfig is the Input for the cluster cfg points at.
func forConfig(cfg *kubeclient.Config) (Input, error) {
	client, err := kubeclient.New(cfg, requestTimeout, "gpupolicy-fn-doctor")
	if err != nil {
		return Input{}, err
	}
	c := restCluster{client}
	return Input{Cluster: c, Objects: c, Server: client.Host()}, nil
}

// get reads path into out; an error status is the server's *apierrors.StatusError, as the
// typed clientset returns it.
func (c restCluster) get(ctx context.Context, path string, query url.Values, out any) error {
	body, err := c.client.Get(ctx, path, query)
	if err != nil {
		return err
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, out); err != nil {
		return fmt.Errorf("decoding the API server's answer to GET %s: %w", path, err)
	}
	return nil
}

// Get reads one object of any kind, as client-go's dynamic client does.
func (c restCluster) Get(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (*unstructured.Unstructured, error) {
	path := discoveryPath(gvr.GroupVersion())
	if namespace != "" {
		path += "/namespaces/" + namespace
	}
	u := &unstructured.Unstructured{}
	if err := c.get(ctx, path+"/"+gvr.Resource+"/"+name, nil, &u.Object); err != nil {
		return nil, err
	}
	return u, nil
}

// List lists the objects of a cluster-scoped kind.
func (c restCluster) List(ctx context.Context, gvr schema.GroupVersionResource) ([]unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	body, err := c.client.Get(ctx, discoveryPath(gvr.GroupVersion())+"/"+gvr.Resource, nil)
	if err != nil {
		return nil, err
	}
	if err := list.UnmarshalJSON(body); err != nil {
		return nil, fmt.Errorf("decoding the API server's list of %s: %w", gvr.Resource, err)
	}
	return list.Items, nil
}

func (c restCluster) ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	if err := c.get(ctx, "/api/v1/namespaces/"+namespace+"/configmaps/"+name, nil, cm); err != nil {
		return nil, err
	}
	return cm, nil
}

func (c restCluster) Nodes(ctx context.Context) ([]corev1.Node, error) {
	var list corev1.NodeList
	err := c.get(ctx, "/api/v1/nodes", nil, &list)
	return list.Items, err
}

func (c restCluster) Pods(ctx context.Context) ([]corev1.Pod, error) {
	var list corev1.PodList
	err := c.get(ctx, "/api/v1/pods", nil, &list)
	return list.Items, err
}

func (c restCluster) Events(ctx context.Context, namespace, fieldSelector string) ([]corev1.Event, error) {
	var list corev1.EventList
	err := c.get(ctx, "/api/v1/namespaces/"+namespace+"/events", url.Values{"fieldSelector": {fieldSelector}}, &list)
	return list.Items, err
}

func (c restCluster) RuntimeClass(ctx context.Context, name string) (*nodev1.RuntimeClass, error) {
	rc := &nodev1.RuntimeClass{}
	if err := c.get(ctx, "/apis/node.k8s.io/v1/runtimeclasses/"+name, nil, rc); err != nil {
		return nil, err
	}
	return rc, nil
}

func (c restCluster) ResourceClaims(ctx context.Context) ([]resourcev1.ResourceClaim, error) {
	var list resourcev1.ResourceClaimList
	err := c.get(ctx, "/apis/resource.k8s.io/v1/resourceclaims", nil, &list)
	return list.Items, err
}

func (c restCluster) ResourceSlices(ctx context.Context) ([]resourcev1.ResourceSlice, error) {
	var list resourcev1.ResourceSliceList
	err := c.get(ctx, "/apis/resource.k8s.io/v1/resourceslices", nil, &list)
	return list.Items, err
}

func (c restCluster) DeviceClass(ctx context.Context, name string) (*resourcev1.DeviceClass, error) {
	dc := &resourcev1.DeviceClass{}
	if err := c.get(ctx, "/apis/resource.k8s.io/v1/deviceclasses/"+name, nil, dc); err != nil {
		return nil, err
	}
	return dc, nil
}

func (c restCluster) APIResources(ctx context.Context, groupVersion string) (*metav1.APIResourceList, error) {
	gv, err := schema.ParseGroupVersion(groupVersion)
	if err != nil {
		return nil, err
	}
	list := &metav1.APIResourceList{}
	if err := c.get(ctx, discoveryPath(gv), nil, list); err != nil {
		return nil, err
	}
	return list, nil
}

// discoveryPath is where the API server serves gv's discovery document.
func discoveryPath(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return "/api/" + gv.Version
	}
	return "/apis/" + gv.Group + "/" + gv.Version
}
