package doctor

import (
	"context"
	"fmt"
	"net/url"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	kjson "sigs.k8s.io/json"
)

// Cluster is the typed reads a diagnosis makes of the API server. Errors are what the server
// answered (*apierrors.StatusError for NotFound, Forbidden, ...) or why it could not be reached.
//
// It is doctor's own, and small on purpose: client-go's typed clientset
// (k8s.io/client-go/kubernetes, with its scheme and apply configurations) costs every
// gpupolicy-fn process about 7 ms of package initialisation — the KRM function and render
// included — although only doctor reads a cluster. The binary therefore reads over plain REST
// (restCluster); tests adapt a clientset, fake or real, with doctortest.FromClientset.
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

// restCluster implements Cluster with one GET per read, decoding the JSON body straight into the
// k8s.io/api type as the typed clientset would (case-sensitive, integers preserved).
type restCluster struct {
	client rest.Interface
}

var _ Cluster = restCluster{}

// forConfig is the Input for the cluster cfg points at. The typed reads and the dynamic client
// (for the -f comparisons) share one REST client and so one connection pool.
func forConfig(cfg *rest.Config) (Input, error) {
	cfg = dynamic.ConfigFor(cfg)
	// JSON only, even where client-go's CBOR feature gates are on: restCluster decodes the
	// bodies itself.
	cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
	client, err := rest.UnversionedRESTClientFor(cfg)
	if err != nil {
		return Input{}, fmt.Errorf("client for %s: %w", cfg.Host, err)
	}
	return Input{Cluster: restCluster{client}, Dynamic: dynamic.New(client), Server: cfg.Host}, nil
}

// get reads path into out. Result.Error turns an error status into the server's
// *apierrors.StatusError, as the typed clientset does.
func (c restCluster) get(ctx context.Context, path string, query url.Values, out any) error {
	req := c.client.Get().AbsPath(path)
	for k, vs := range query {
		for _, v := range vs {
			if v != "" { // as the typed clientset, which leaves empty options out
				req.Param(k, v)
			}
		}
	}
	res := req.Do(ctx)
	if err := res.Error(); err != nil {
		return err
	}
	body, err := res.Raw()
	if err != nil {
		return err
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, out); err != nil {
		return fmt.Errorf("decoding the API server's answer to GET %s: %w", path, err)
	}
	return nil
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
