package gitops

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/crypto/bcrypt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/gpupolicy/gpupolicy/e2e/internal/cluster"
)

// Versions e2e/hack/build-fleet-peers.sh builds; it names its cache directories after them.
const (
	RegistryVersion         = "v3.1.2"
	SourceControllerVersion = "v1.9.6"
	ArgoCDVersion           = "v3.6.2"
)

var (
	OCIRepositoryGVR  = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "ocirepositories"}
	ApplicationSetGVR = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applicationsets"}
	ApplicationGVR    = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applications"}
	AppProjectGVR     = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "appprojects"}
)

// FleetPeers are the cached binaries of build-fleet-peers.sh that a test asked for.
type FleetPeers struct {
	Registry         string
	SourceController string
	SourceCRDs       string // source-controller's own CRDs (the OCIRepository of its version)
	AppSetController string
	ArgoCDCRDs       string
}

// EnsureFleetPeers runs build-fleet-peers.sh for the named peers (registry, source-controller,
// appset; it returns at once when they are cached) and returns their paths.
func EnsureFleetPeers(script string, names ...string) (*FleetPeers, error) {
	root, err := cluster.BuildPeer(script, names...)
	if err != nil {
		return nil, err
	}
	p := &FleetPeers{}
	var want []string
	for _, n := range names {
		switch n {
		case "registry":
			p.Registry = filepath.Join(root, "registry-"+RegistryVersion, "registry")
			want = append(want, p.Registry)
		case "source-controller":
			dir := filepath.Join(root, "source-controller-"+SourceControllerVersion)
			p.SourceController, p.SourceCRDs = filepath.Join(dir, "source-controller"), filepath.Join(dir, "crds")
			want = append(want, p.SourceController, p.SourceCRDs)
		case "appset":
			dir := filepath.Join(root, "argocd-applicationset-controller-"+ArgoCDVersion)
			p.AppSetController, p.ArgoCDCRDs = filepath.Join(dir, "argocd-applicationset-controller"), filepath.Join(dir, "crds")
			want = append(want, p.AppSetController, p.ArgoCDCRDs)
		}
	}
	for _, w := range want {
		if _, err := os.Stat(w); err != nil {
			return nil, fmt.Errorf("%s did not produce %s: %w", script, w, err)
		}
	}
	return p, nil
}

// Registry is a running distribution registry on loopback.
type Registry struct {
	*cluster.Server
	Addr string // host:port
}

// StartRegistry runs the registry with filesystem storage under dir, on a loopback port, plain
// HTTP; with a user it requires basic authentication (an htpasswd file with the bcrypt hash of
// password, the only kind the registry reads).
func StartRegistry(ctx context.Context, bin, dir, user, password string) (*Registry, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	debug, err := freePort()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "storage"), 0o755); err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	config := fmt.Sprintf(`version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
  debug:
    addr: 127.0.0.1:%d
`, filepath.Join(dir, "storage"), addr, debug)
	if user != "" {
		hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
		if err != nil {
			return nil, err
		}
		htpasswd := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(htpasswd, []byte(user+":"+string(hash)+"\n"), 0o600); err != nil {
			return nil, err
		}
		config += fmt.Sprintf("auth:\n  htpasswd:\n    realm: gpupolicy-e2e\n    path: %s\n", htpasswd)
	}
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve", cfgPath)
	// /v2/ answers 401 with authentication on: the debug server's health endpoint says ready.
	s, err := cluster.Serve(ctx, "registry", cmd, filepath.Join(dir, "registry.log"), fmt.Sprintf("http://127.0.0.1:%d/debug/health", debug), time.Minute)
	if err != nil {
		return nil, err
	}
	return &Registry{Server: s, Addr: addr}, nil
}

// StartSourceController runs Flux's source-controller with the admin kubeconfig, watching
// every namespace, storing and serving its artifacts on loopback (kustomize-controller fetches
// them from the URL it advertises); it returns once its health endpoint answers.
func StartSourceController(ctx context.Context, bin, kubeconfig, dir string) (*cluster.Server, error) {
	health, err := freePort()
	if err != nil {
		return nil, err
	}
	storage, err := freePort()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "artifacts"), 0o755); err != nil {
		return nil, err
	}
	storageAddr := "127.0.0.1:" + strconv.Itoa(storage)
	cmd := exec.Command(bin, "--watch-all-namespaces", "--metrics-addr=0",
		"--health-addr=127.0.0.1:"+strconv.Itoa(health),
		"--storage-path="+filepath.Join(dir, "artifacts"), "--storage-addr="+storageAddr, "--storage-adv-addr="+storageAddr,
		"--log-level=info", "--concurrent=2")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "RUNTIME_NAMESPACE="+FluxNamespace)
	return cluster.Serve(ctx, "source-controller", cmd, filepath.Join(dir, "source-controller.log"), fmt.Sprintf("http://127.0.0.1:%d/readyz", health), time.Minute)
}

// OCIArtifact is what source-controller reports of an OCIRepository's artifact.
type OCIArtifact struct {
	Ready, Message, Revision, Digest string
	Metadata                         map[string]string
}

// OCIRepositoryArtifact reads an OCIRepository's Ready condition and artifact.
func OCIRepositoryArtifact(ctx context.Context, cfg *rest.Config, namespace, name string) (OCIArtifact, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return OCIArtifact{}, err
	}
	o, err := dyn.Resource(OCIRepositoryGVR).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return OCIArtifact{}, err
	}
	a := OCIArtifact{Ready: "Unknown"}
	a.Revision, _, _ = unstructured.NestedString(o.Object, "status", "artifact", "revision")
	a.Digest, _, _ = unstructured.NestedString(o.Object, "status", "artifact", "digest")
	a.Metadata, _, _ = unstructured.NestedStringMap(o.Object, "status", "artifact", "metadata")
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Ready" {
			a.Ready, _ = m["status"].(string)
			a.Message, _ = m["message"].(string)
		}
	}
	return a, nil
}
