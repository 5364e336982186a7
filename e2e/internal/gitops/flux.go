// Package gitops runs the real GitOps engines against the test control plane: Flux's
// kustomize-controller reconciling a rendered Flux layout from an artifact served over loopback
// HTTP, and argo-sync (Argo CD's gitops-engine sync) applying the rendered waves. Both binaries
// are built and cached by e2e/hack/build-gitops.sh.
package gitops

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpupolicy/gpupolicy/e2e/internal/cluster"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// Versions the binaries are built at; build-gitops.sh names its cache directories after them.
const (
	KustomizeControllerVersion = "v1.9.6"
	GitopsEngineVersion        = "v0.7.3"
	// FluxNamespace is where the controller runs and the Kustomizations live.
	FluxNamespace = "flux-system"
)

var (
	KustomizationGVR = schema.GroupVersionResource{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Resource: "kustomizations"}
	GitRepositoryGVR = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "gitrepositories"}
)

// Binaries are the cached engine binaries and the Flux CRDs.
type Binaries struct {
	KustomizeController string
	FluxCRDs            string // directory of the kustomize-controller and source-controller CRDs
	ArgoSync            string
}

// EnsureBinaries runs build-gitops.sh (it returns at once when everything is cached) and
// returns the cached paths.
func EnsureBinaries(script string) (*Binaries, error) {
	root, err := cluster.BuildPeer(script)
	if err != nil {
		return nil, err
	}
	b := &Binaries{
		KustomizeController: filepath.Join(root, "kustomize-controller-"+KustomizeControllerVersion, "kustomize-controller"),
		FluxCRDs:            filepath.Join(root, "kustomize-controller-"+KustomizeControllerVersion, "crds"),
		ArgoSync:            filepath.Join(root, "argo-sync-gitops-engine-"+GitopsEngineVersion, "argo-sync"),
	}
	for _, p := range []string{b.KustomizeController, b.FluxCRDs, b.ArgoSync} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%s did not produce %s: %w", script, p, err)
		}
	}
	return b, nil
}

// StartKustomizeController runs the controller with the admin kubeconfig, watching every
// namespace, with its health endpoint on a loopback port; it returns once that answers.
func StartKustomizeController(ctx context.Context, bin, kubeconfig, logDir string) (*cluster.Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	health := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(bin, "--watch-all-namespaces", "--metrics-addr=0", "--health-addr="+health,
		// A dependency that is not ready is re-checked every 10 s (default 30 s).
		"--requeue-dependency=5s", "--log-level=info", "--concurrent=4",
		// A stage stuck in its health check takes a new revision at once instead of after its
		// timeout (10m): the tests publish the fix while a stall is on.
		"--feature-gates=CancelHealthCheckOnNewRevision=true")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "RUNTIME_NAMESPACE="+FluxNamespace)
	return cluster.Serve(ctx, "kustomize-controller", cmd, filepath.Join(logDir, "kustomize-controller.log"), "http://"+health+"/readyz", time.Minute)
}

// ArtifactServer serves tarballs of directories over loopback HTTP, as source-controller
// serves the artifacts of its sources.
type ArtifactServer struct {
	ln  net.Listener
	srv *http.Server
	mu  sync.Mutex
	tar map[string][]byte // by path
}

// NewArtifactServer starts serving on a loopback port.
func NewArtifactServer() (*ArtifactServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a := &ArtifactServer{ln: ln, tar: map[string][]byte{}}
	a.srv = &http.Server{Handler: http.HandlerFunc(a.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = a.srv.Serve(ln) }()
	return a, nil
}

func (a *ArtifactServer) serve(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	b, ok := a.tar[r.URL.Path]
	a.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/gzip")
	_, _ = w.Write(b)
}

// Close stops serving.
func (a *ArtifactServer) Close() { _ = a.srv.Close() }

// Artifact is what a source's status.artifact says about one tarball.
type Artifact struct {
	URL, Path, Revision, Digest string
	Size                        int64
}

// Publish packs dir (paths in the tarball relative to dir, as in the repository Flux reads) and
// serves it under a path named after its digest.
func (a *ArtifactServer) Publish(dir string) (Artifact, error) {
	b, err := tarball(dir)
	if err != nil {
		return Artifact{}, err
	}
	sum := sha256.Sum256(b)
	digest := hex.EncodeToString(sum[:])
	p := "/gitrepository/" + FluxNamespace + "/" + digest[:12] + ".tar.gz"
	a.mu.Lock()
	a.tar[p] = b
	a.mu.Unlock()
	return Artifact{
		URL: "http://" + a.ln.Addr().String() + p, Path: strings.TrimPrefix(p, "/"),
		// A Git revision as source-controller writes it; the "commit" is the content digest.
		Revision: "main@sha1:" + digest[:40], Digest: "sha256:" + digest, Size: int64(len(b)),
	}, nil
}

// tarball is a deterministic gzipped tar of dir's regular files.
func tarball(dir string) ([]byte, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(dir, f)
		if err := tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// SetGitRepository creates or keeps the GitRepository ns/name and points its status.artifact
// at art with a status-subresource patch, as source-controller does after a fetch, so the
// Kustomizations that read it reconcile art's revision.
func SetGitRepository(ctx context.Context, cfg *rest.Config, name string, art Artifact) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	repos := dyn.Resource(GitRepositoryGVR).Namespace(FluxNamespace)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
		"metadata": map[string]any{"name": name, "namespace": FluxNamespace},
		// Nothing fetches this URL: the status below is the artifact, as no source-controller runs.
		"spec": map[string]any{"url": "https://git.invalid/fleet.git", "interval": "10m", "ref": map[string]any{"branch": "main"}},
	}}
	if _, err := repos.Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create GitRepository %s: %w", name, err)
	}
	now := time.Now().UTC().Format(time.RFC3339)
	status := map[string]any{"status": map[string]any{
		"observedGeneration": 1,
		"artifact": map[string]any{
			"path": art.Path, "url": art.URL, "revision": art.Revision, "digest": art.Digest,
			"lastUpdateTime": now, "size": art.Size,
		},
		"conditions": []any{map[string]any{
			"type": "Ready", "status": "True", "reason": "Succeeded", "observedGeneration": 1,
			"lastTransitionTime": now, "message": "stored artifact for revision '" + art.Revision + "'",
		}},
	}}
	patch, err := json.Marshal(status)
	if err != nil {
		return err
	}
	if _, err := repos.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("patch GitRepository %s status: %w", name, err)
	}
	return nil
}

// KustomizationState is one Kustomization's Ready condition and last applied revision.
type KustomizationState struct {
	Name, Ready, Reason, Message, Revision string
}

func (s KustomizationState) String() string {
	return fmt.Sprintf("%s Ready=%s %s (%s) at %s", s.Name, s.Ready, s.Reason, s.Message, s.Revision)
}

// Kustomizations reads the state of every Kustomization in FluxNamespace, by name.
func Kustomizations(ctx context.Context, cfg *rest.Config) (map[string]KustomizationState, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	list, err := dyn.Resource(KustomizationGVR).Namespace(FluxNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]KustomizationState{}
	for _, k := range list.Items {
		s := KustomizationState{Name: k.GetName(), Ready: "Unknown"}
		s.Revision, _, _ = unstructured.NestedString(k.Object, "status", "lastAppliedRevision")
		conds, _, _ := unstructured.NestedSlice(k.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Ready" {
				s.Ready, _ = m["status"].(string)
				s.Reason, _ = m["reason"].(string)
				s.Message, _ = m["message"].(string)
			}
		}
		out[s.Name] = s
	}
	return out, nil
}

// ErrNotReady says which Kustomizations were not Ready at a revision by the deadline.
var ErrNotReady = errors.New("kustomizations not ready")

// WaitReady waits until every named Kustomization is Ready=True having applied revision ("" for
// any), calling progress with each change of state; it returns the time each became Ready.
func WaitReady(ctx context.Context, cfg *rest.Config, names []string, revision string, timeout time.Duration, progress func(KustomizationState)) (map[string]time.Duration, error) {
	start := time.Now()
	ready := map[string]time.Duration{}
	last := map[string]string{}
	for {
		states, err := Kustomizations(ctx, cfg)
		if err == nil {
			for _, n := range names {
				s, ok := states[n]
				if !ok {
					s = KustomizationState{Name: n, Ready: "absent"}
				}
				if progress != nil && last[n] != s.String() {
					last[n] = s.String()
					progress(s)
				}
				if _, done := ready[n]; !done && s.Ready == "True" && (revision == "" || s.Revision == revision) {
					ready[n] = time.Since(start)
				}
			}
		}
		if len(ready) == len(names) {
			return ready, nil
		}
		if time.Since(start) > timeout {
			var pending []string
			for _, n := range names {
				if _, ok := ready[n]; !ok {
					pending = append(pending, last[n])
				}
			}
			return ready, fmt.Errorf("%w after %s: %s", ErrNotReady, timeout, strings.Join(pending, "; "))
		}
		select {
		case <-ctx.Done():
			return ready, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
