package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/gpupolicy/gpupolicy/e2e/internal/fakenode"
	"github.com/gpupolicy/gpupolicy/e2e/internal/gitops"
	"github.com/gpupolicy/gpupolicy/e2e/internal/stack"
)

var (
	fleetPeersMu sync.Mutex
	fleetPeers   = map[string]*gitops.FleetPeers{}
)

// fleetPeerBinaries builds (once per set) and returns the fleet delivery peers a test runs.
func fleetPeerBinaries(t *testing.T, names ...string) *gitops.FleetPeers {
	t.Helper()
	fleetPeersMu.Lock()
	defer fleetPeersMu.Unlock()
	key := strings.Join(names, ",")
	if p := fleetPeers[key]; p != nil {
		return p
	}
	p, err := gitops.EnsureFleetPeers(filepath.Join(env.repoRoot, "e2e", "hack", "build-fleet-peers.sh"), names...)
	if err != nil {
		t.Fatal(err)
	}
	fleetPeers[key] = p
	return p
}

// writeFiles writes name → content under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// gpupolicyFn runs bin/gpupolicy-fn with env added; it fails the test unless the exit code is want.
func gpupolicyFn(t *testing.T, want int, extraEnv []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(env.repoRoot, "bin", "gpupolicy-fn"), args...)
	cmd.Env = append(os.Environ(), extraEnv...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != want {
		t.Fatalf("gpupolicy-fn %s: exit %d, want %d\n%s", strings.Join(args, " "), code, want, out)
	}
	return string(out)
}

// pushedDigest is the digest fleet push printed for a cluster.
func pushedDigest(t *testing.T, out, url string) string {
	t.Helper()
	for line := range strings.Lines(out) {
		if d, ok := strings.CutPrefix(strings.TrimSpace(line), url+"@"); ok {
			return d
		}
	}
	t.Fatalf("fleet push printed no digest for %s:\n%s", url, out)
	return ""
}

// TestFleetOCI delivers a fleet through OCI artifacts on real engines: `gpupolicy-fn fleet
// render` renders two cluster overlays (Flux paths from each artifact's root), `fleet push`
// uploads each tree in Flux's artifact format to a real distribution registry v3.1.2 without
// authentication and to one with basic authentication, the real source-controller v1.10.1
// reconciles an OCIRepository from each (the one with authentication through a
// dockerconfigjson Secret), and the real kustomize-controller v1.9.6 applies the canary
// cluster's artifact: its flux/ Kustomizations, then every stage, until each is Ready at the
// artifact's revision on two kwok GPU nodes. The revision (tag@digest) and the annotations
// round-trip; a second push of the same tree with a new commit moves every stage to the new
// digest without uploading the layer again.
func TestFleetOCI(t *testing.T) {
	bins := gitopsBinaries(t)
	peers := fleetPeerBinaries(t, "registry", "source-controller")
	ctx := context.Background()
	start := time.Now()
	fe := newFleetEnv(t, "fleet-oci", fleetNodes("oci", 1, nil, nil), fakenode.ProbeReadiness)
	t.Logf("control plane and %d nodes up in %s", len(fe.nodes), time.Since(start).Round(time.Second))
	if err := stack.InstallMonitoringCRDs(ctx, fe.cfg, peers.SourceCRDs); err != nil {
		t.Fatalf("source-controller %s CRDs: %v", gitops.SourceControllerVersion, err)
	}

	// The fleet: the fleet tests' policy as the base, a canary cluster as it is and a prod
	// cluster with its own time-slicing.
	fleet := filepath.Join(fe.dir, "fleet")
	writeFiles(t, fleet, map[string]string{
		"base/gpupolicy.yaml":                       string(fe.policy),
		"base/kustomization.yaml":                   "resources: [gpupolicy.yaml]\n",
		"clusters/canary/kustomization.yaml":        "generators: [policy]\n",
		"clusters/canary/policy/kustomization.yaml": "resources: [../../../base]\n",
		"clusters/prod/kustomization.yaml":          "generators: [policy]\n",
		"clusters/prod/policy/kustomization.yaml": `resources: [../../../base]
patches:
- target: {kind: GPUPolicy}
  patch: |
    - op: replace
      path: /spec/nodePools/0/devicePlugin/sharing/timeSlicing/replicas
      value: 8
`,
	})
	trees := filepath.Join(fleet, "trees")
	gpupolicyFn(t, 0, nil, "fleet", "render", filepath.Join(fleet, "clusters"), "-o", trees, "--flux-path", ".", "--flux-source", "OCIRepository/gpu-stack")

	open, err := gitops.StartRegistry(ctx, peers.Registry, filepath.Join(fe.dir, "registry-open"), "", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(open.Stop)
	const user, password = "fleet-ci", "s3cret-fleet"
	locked, err := gitops.StartRegistry(ctx, peers.Registry, filepath.Join(fe.dir, "registry-auth"), user, password)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(locked.Stop)

	const tag = "main"
	rev1 := "main@sha1:1111111111111111111111111111111111111111"
	push := func(reg *gitops.Registry, revision string, extraEnv []string, extra ...string) string {
		args := append([]string{"fleet", "push", trees, "oci://" + reg.Addr + "/fleet", "--tag", tag, "--plain-http",
			"--source", "https://git.example.com/gpu/fleet", "--revision", revision, "--created", "2026-12-07T10:00:00Z"}, extra...)
		return gpupolicyFn(t, 0, extraEnv, args...)
	}
	openOut := push(open, rev1, nil)
	// Without credentials the locked registry refuses, and says so for each cluster.
	denied := gpupolicyFn(t, 1, nil, "fleet", "push", trees, "oci://"+locked.Addr+"/fleet", "--tag", tag, "--plain-http", "--source", "s", "--revision", rev1)
	if !strings.Contains(denied, "cluster canary:") || !strings.Contains(denied, "2 of 2 clusters were not pushed") {
		t.Fatalf("a push without credentials:\n%s", denied)
	}
	// The canary first, then the rest (what CI does when the canaries must be Ready first).
	lockedOut := push(locked, rev1, []string{"GPUPOLICY_REGISTRY_PASSWORD=" + password}, "--username", user, "--clusters", "canary")
	if strings.Contains(lockedOut, "/fleet/prod:") {
		t.Fatalf("--clusters canary pushed prod too:\n%s", lockedOut)
	}
	push(locked, rev1, []string{"GPUPOLICY_REGISTRY_PASSWORD=" + password}, "--username", user, "--clusters", "prod")
	canaryURL := "oci://" + locked.Addr + "/fleet/canary:" + tag
	canary1 := pushedDigest(t, lockedOut, canaryURL)
	prodOpen := pushedDigest(t, openOut, "oci://"+open.Addr+"/fleet/prod:"+tag)
	if canary1 != pushedDigest(t, openOut, "oci://"+open.Addr+"/fleet/canary:"+tag) {
		t.Errorf("the same tree, revision and time pushed to two registries got two digests:\n%s\n%s", openOut, lockedOut)
	}
	t.Logf("pushed: %s", strings.TrimSpace(lockedOut))

	// source-controller and kustomize-controller against the control plane.
	sc, err := gitops.StartSourceController(ctx, peers.SourceController, fe.c.Kubeconfig, filepath.Join(fe.dir, "source-controller"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sc.Stop)
	startFlux(t, ctx, bins, fe)

	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	dockerConfig, _ := json.Marshal(map[string]any{"auths": map[string]any{locked.Addr: map[string]string{"username": user, "password": password, "auth": auth}}})
	if _, err := fe.cs.CoreV1().Secrets(gitops.FluxNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet-registry"},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: dockerConfig},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The example's two objects, pointed at the test's registry (plain HTTP: insecure).
	objs := readObjects(t, filepath.Join(env.repoRoot, "examples", "fleet", "flux", "gpu-stack.yaml"))
	if len(objs) != 2 || objs[0].GetKind() != "OCIRepository" || objs[1].GetKind() != "Kustomization" {
		t.Fatalf("examples/fleet/flux/gpu-stack.yaml: want an OCIRepository and a Kustomization")
	}
	repo, root := objs[0], objs[1]
	must(t, unstructured.SetNestedField(repo.Object, "oci://"+locked.Addr+"/fleet/canary", "spec", "url"))
	must(t, unstructured.SetNestedField(repo.Object, true, "spec", "insecure"))
	must(t, unstructured.SetNestedField(repo.Object, "10s", "spec", "interval"))
	prod := repo.DeepCopy()
	prod.SetName("prod")
	must(t, unstructured.SetNestedField(prod.Object, "oci://"+open.Addr+"/fleet/prod", "spec", "url"))
	unstructured.RemoveNestedField(prod.Object, "spec", "secretRef")
	dyn, err := dynamic.NewForConfig(fe.cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []*unstructured.Unstructured{repo, prod} {
		if _, err := dyn.Resource(gitops.OCIRepositoryGVR).Namespace(gitops.FluxNamespace).Create(ctx, o, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
			t.Fatalf("OCIRepository %s: %v", o.GetName(), err)
		}
	}
	artifactAt := func(name, revision, digest string) {
		t.Helper()
		eventually(t, 2*time.Minute, fmt.Sprintf("OCIRepository %s Ready at %s@%s", name, tag, digest), func() (bool, string) {
			a, err := gitops.OCIRepositoryArtifact(ctx, fe.cfg, gitops.FluxNamespace, name)
			if err != nil {
				return false, err.Error()
			}
			ok := a.Ready == "True" && a.Revision == tag+"@"+digest &&
				a.Metadata["org.opencontainers.image.revision"] == revision &&
				a.Metadata["org.opencontainers.image.source"] == "https://git.example.com/gpu/fleet"
			return ok, fmt.Sprintf("Ready=%s (%s) revision %s metadata %v", a.Ready, a.Message, a.Revision, a.Metadata)
		})
	}
	artifactAt("gpu-stack", rev1, canary1)
	artifactAt("prod", rev1, prodOpen)
	t.Logf("source-controller: both artifacts stored, revisions and annotations as pushed (%s)", time.Since(start).Round(time.Second))

	if _, err := dyn.Resource(gitops.KustomizationGVR).Namespace(gitops.FluxNamespace).Create(ctx, root, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
		t.Fatal(err)
	}
	progress := func(s gitops.KustomizationState) { t.Logf("  %6.1fs %s", time.Since(start).Seconds(), s) }
	if _, err := gitops.WaitReady(ctx, fe.cfg, append([]string{"gpu-stack"}, fleetStages...), tag+"@"+canary1, 5*time.Minute, progress); err != nil {
		t.Fatal(err)
	}
	fe.waitNodes(t, 2*time.Minute)

	// A new commit with the same tree: a new manifest, the same layer (not uploaded again), and
	// every stage applies the new revision.
	rev2 := "main@sha1:2222222222222222222222222222222222222222"
	out2 := push(locked, rev2, []string{"GPUPOLICY_REGISTRY_PASSWORD=" + password}, "--username", user, "-o", "json")
	var pushed []struct{ Cluster, URL, Digest, Revision string }
	if err := json.Unmarshal([]byte(out2), &pushed); err != nil || len(pushed) != 2 || pushed[0].Cluster != "canary" || pushed[0].Revision != rev2 {
		t.Fatalf("fleet push -o json: %v\n%s", err, out2)
	}
	canary2 := pushed[0].Digest
	if canary2 == canary1 {
		t.Fatal("a new revision kept the manifest digest")
	}
	artifactAt("gpu-stack", rev2, canary2)
	if _, err := gitops.WaitReady(ctx, fe.cfg, append([]string{"gpu-stack"}, fleetStages...), tag+"@"+canary2, 3*time.Minute, progress); err != nil {
		t.Fatal(err)
	}
	if uploads := layerUploads(t, filepath.Join(fe.dir, "registry-auth", "registry.log")); uploads != 4 {
		t.Errorf("the registry took %d blob uploads (want 4: two clusters' layer and config, once each)", uploads)
	}
	fe.checkNoViolations(t)
}

// layerUploads counts the blob uploads the registry completed (PUT .../blobs/uploads/...).
func layerUploads(t *testing.T, log string) int {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, `"PUT /v2/`) && strings.Contains(line, "/blobs/uploads/") && strings.Contains(line, " 201 ") {
			n++
		}
	}
	return n
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
