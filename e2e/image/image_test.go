package image

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// TestImage loads bin/gpupolicy-image.tar into a real containerd and runs it the ways the
// rendered stack does: as the KRM function (its entrypoint) and as every node program the
// rendered DaemonSets call, by the bare command name the kubelet would resolve.
func TestImage(t *testing.T) {
	containerdBin := requireTools(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(root, "bin", "gpupolicy-image.tar")
	fn := filepath.Join(root, "bin", "gpupolicy-fn")
	for _, f := range []string{fn, tarball} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%v: run `make image` first (e2e/run.sh does; it also builds bin/gpupolicy-fn)", err)
		}
	}

	input := resourceList(t, filepath.Join(root, "examples", "kustomize", "gpupolicy.yaml"))
	want, err := runLocal(fn, input)
	if err != nil {
		t.Fatal(err)
	}
	tag, commands := renderedImage(t, want)
	for _, c := range []string{"gpu-node-agent", "gpu-device-plugin", "gpu-exporter"} {
		if !slices.Contains(commands, c) {
			t.Fatalf("the rendered DaemonSets run %v from %s, not %s: the example changed, or the parsing here broke", commands, tag, c)
		}
	}

	c := startContainerd(t, containerdBin)
	ctx := context.Background()
	if _, _, err := c.ctr(ctx, nil, "image", "import", tarball); err != nil {
		t.Fatal(err)
	}
	refs, _, err := c.ctr(ctx, nil, "image", "ls", "-q")
	if err != nil {
		t.Fatal(err)
	}
	// In k8s.io the CRI plugin adds each image's ID as a reference too; the names are the rest.
	got := slices.DeleteFunc(strings.Fields(string(refs)), func(r string) bool { return strings.HasPrefix(r, "sha256:") })
	if !slices.Equal(got, []string{tag}) {
		t.Fatalf("%s holds images %q; want exactly %q, what bin/gpupolicy-fn renders for spec.images.gpupolicy by default", tarball, got, tag)
	}
	cfg := imageConfig(t, c, tag)
	if want := []string{"/usr/local/bin/gpupolicy-fn"}; !slices.Equal(cfg.Entrypoint, want) {
		t.Errorf("Entrypoint = %q, want %q", cfg.Entrypoint, want)
	}
	if cfg.User != "65532:65532" {
		t.Errorf("User = %q, want 65532:65532 (nonroot; the containers that need root say runAsUser: 0)", cfg.User)
	}
	if v := cfg.Labels["org.opencontainers.image.version"]; !strings.HasSuffix(tag, ":"+v) {
		t.Errorf("label org.opencontainers.image.version = %q, not the version in %s: built with another VERSION", v, tag)
	}

	t.Run("KRM function", func(t *testing.T) {
		got, stderr, err := c.run(t, tag, "krm", input)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("the image's KRM output differs from bin/gpupolicy-fn's for the same ResourceList: %s\nstderr: %s", firstDiff(got, want), stderr)
		}
	})
	for _, cmd := range commands {
		t.Run(cmd, func(t *testing.T) {
			out, stderr, err := c.run(t, tag, "help-"+cmd, nil, cmd, "--help")
			if err != nil {
				t.Fatalf("%s --help in the image (its glibc/cgo libraries or PATH): %v", cmd, err)
			}
			if len(out)+len(stderr) == 0 {
				t.Fatalf("%s --help printed nothing", cmd)
			}
		})
	}
}

// requireTools returns the containerd binary, or skips (fails with CI set) when the test
// cannot run here: it needs root and a containerd, ctr, shim and runc.
func requireTools(t *testing.T) string {
	t.Helper()
	unavailable := func(format string, args ...any) {
		if os.Getenv("CI") != "" {
			t.Fatalf(format+" (CI is set: run `make host-deps` as root)", args...)
		}
		t.Skipf(format, args...)
	}
	if os.Geteuid() != 0 {
		unavailable("needs root to run containerd")
	}
	var bin string
	for _, tool := range []string{"containerd", "ctr", "containerd-shim-runc-v2", "runc"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			unavailable("%s not installed", tool)
		}
		if tool == "containerd" {
			bin = p
		}
	}
	return bin
}

// resourceList wraps the policy in a ResourceList as kustomize hands an exec generator its
// config: as functionConfig, no items.
func resourceList(t *testing.T, policy string) []byte {
	t.Helper()
	b, err := os.ReadFile(policy)
	if err != nil {
		t.Fatal(err)
	}
	var in bytes.Buffer
	in.WriteString("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\nfunctionConfig:\n")
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		in.WriteString("  " + line + "\n")
	}
	return in.Bytes()
}

func runLocal(bin string, stdin []byte) ([]byte, error) {
	cmd := exec.Command(bin)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s on the example ResourceList: %w\n%s", bin, err, errb.String())
	}
	return out.Bytes(), nil
}

// renderedImage reads the KRM output: the image of the gpu-node-agent DaemonSet (the
// spec.images.gpupolicy default, since the example leaves it unset) and the commands every
// container of that image runs, sorted.
func renderedImage(t *testing.T, out []byte) (string, []string) {
	t.Helper()
	var rl struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := yaml.Unmarshal(out, &rl); err != nil {
		t.Fatalf("KRM output: %v", err)
	}
	var sets []appsv1.DaemonSet
	var tag string
	for _, item := range rl.Items {
		var ds appsv1.DaemonSet
		if err := json.Unmarshal(item, &ds); err != nil || ds.Kind != "DaemonSet" {
			continue
		}
		sets = append(sets, ds)
		if ds.Name == "gpu-node-agent" && len(ds.Spec.Template.Spec.Containers) == 1 {
			tag = ds.Spec.Template.Spec.Containers[0].Image
		}
	}
	if tag == "" {
		t.Fatal("KRM output of the example has no gpu-node-agent DaemonSet with one container")
	}
	var commands []string
	for _, ds := range sets {
		pod := ds.Spec.Template.Spec
		for _, ctr := range append(pod.InitContainers, pod.Containers...) {
			if ctr.Image != tag {
				continue
			}
			if len(ctr.Command) == 0 {
				t.Fatalf("DaemonSet %s container %s runs %s without a command: it would run the function", ds.Name, ctr.Name, tag)
			}
			if !slices.Contains(commands, ctr.Command[0]) {
				commands = append(commands, ctr.Command[0])
			}
		}
	}
	slices.Sort(commands)
	return tag, commands
}

type ociConfig struct {
	Entrypoint []string          `json:"Entrypoint"`
	User       string            `json:"User"`
	Labels     map[string]string `json:"Labels"`
}

// imageConfig reads the image's config as containerd stored it: image → manifest (through an
// index if the import made one) → config blob.
func imageConfig(t *testing.T, c *containerd, ref string) ociConfig {
	t.Helper()
	ctx := context.Background()
	ls, _, err := c.ctr(ctx, nil, "image", "ls")
	if err != nil {
		t.Fatal(err)
	}
	var digest string
	for _, line := range strings.Split(string(ls), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == ref {
			digest = f[2]
		}
	}
	if digest == "" {
		t.Fatalf("%s not in `ctr image ls`:\n%s", ref, ls)
	}
	var doc struct {
		MediaType string `json:"mediaType"`
		Config    struct {
			Digest string `json:"digest"`
		} `json:"config"`
		Manifests []struct {
			Digest   string `json:"digest"`
			Platform struct {
				OS           string `json:"os"`
				Architecture string `json:"architecture"`
			} `json:"platform"`
		} `json:"manifests"`
	}
	for range 2 {
		blob := content(t, c, digest)
		if err := json.Unmarshal(blob, &doc); err != nil {
			t.Fatalf("manifest %s: %v", digest, err)
		}
		if doc.Config.Digest != "" {
			break
		}
		for _, m := range doc.Manifests {
			if m.Platform.OS == "linux" && m.Platform.Architecture == runtime.GOARCH {
				digest = m.Digest
			}
		}
	}
	if doc.Config.Digest == "" {
		t.Fatalf("no linux/%s manifest with a config for %s", runtime.GOARCH, ref)
	}
	var img struct {
		Config ociConfig `json:"config"`
	}
	if err := json.Unmarshal(content(t, c, doc.Config.Digest), &img); err != nil {
		t.Fatalf("image config %s: %v", doc.Config.Digest, err)
	}
	return img.Config
}

func content(t *testing.T, c *containerd, digest string) []byte {
	t.Helper()
	b, _, err := c.ctr(context.Background(), nil, "content", "get", digest)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// firstDiff names the first line where got and want part, for a readable failure.
func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d: image %q, local %q (%d vs %d bytes)", i+1, gl, wl, len(got), len(want))
		}
	}
	return fmt.Sprintf("%d vs %d bytes", len(got), len(want))
}
