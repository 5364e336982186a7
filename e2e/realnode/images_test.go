package realnode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// imageSet is every image a node imports (no registry is reachable): the project's image
// (make image) and the stand-ins of e2e/internal/standin (pause, NVIDIA's toolkit installer,
// the workload), built by internal/realnode/standinimages in its own process (see there why).
type imageSet struct {
	gpupolicyRef, gpupolicyTar string
	workloadRef                string
	mockGPUs                   []string // the dgxa100 mock's GPU UUIDs, in index order
	dir                        string
	mu                         sync.Mutex
	standins                   map[string][]string // archives by toolkit ref
}

// images is set by buildImages for the helpers that compare a pod's image.
var images *imageSet

// gpupolicyImageRef is what gpupolicy-fn renders for spec.images.gpupolicy by default (the
// image `make image` tags); read from the rendered stack so the two cannot drift apart.
func gpupolicyImageRef(t *testing.T) string {
	t.Helper()
	r := render(t, cases[0].testdata)
	ds, ok := r.daemonSets["gpu-node-agent"]
	if !ok {
		t.Fatal("no gpu-node-agent DaemonSet rendered")
	}
	return ds.Spec.Template.Spec.Containers[0].Image
}

func buildImages(t *testing.T) *imageSet {
	t.Helper()
	tar := os.Getenv("E2E_GPUPOLICY_IMAGE")
	if tar == "" {
		tar = filepath.Join(env.repoRoot, "bin", "gpupolicy-image.tar")
	}
	if _, err := os.Stat(tar); err != nil {
		t.Fatalf("the project's image %s is missing: run `make image` (or point E2E_GPUPOLICY_IMAGE at a docker-archive tagged as gpupolicy-fn renders spec.images.gpupolicy)", tar)
	}
	images = &imageSet{
		gpupolicyRef: gpupolicyImageRef(t), gpupolicyTar: tar,
		dir:      filepath.Join(env.workDir, "images"),
		standins: map[string][]string{},
	}
	if err := checkArchiveTag(tar, images.gpupolicyRef); err != nil {
		t.Fatal(err)
	}
	return images
}

// standinOutput is what internal/realnode/standinimages prints.
type standinOutput struct {
	Images []struct {
		Ref, Tar string
	} `json:"images"`
	MockGPUs []string `json:"mockGPUs"`
	Workload string   `json:"workload"`
}

// tars are the archives a node imports, with the toolkit stand-in tagged toolkitRef (the
// rendered toolkit-copy image).
func (s *imageSet) tars(t *testing.T, toolkitRef string) []string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	built, ok := s.standins[toolkitRef]
	if !ok {
		dir := filepath.Join(s.dir, strings.NewReplacer("/", "_", ":", "_").Replace(toolkitRef))
		cmd := exec.Command("go", "run", "./internal/realnode/standinimages", "-o", dir, "-toolkit", toolkitRef)
		cmd.Dir = filepath.Join(env.repoRoot, "e2e")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("build the stand-in images: %v\n%s", err, stderr.String())
		}
		var o standinOutput
		if err := json.Unmarshal(out, &o); err != nil {
			t.Fatalf("standinimages printed %q: %v", out, err)
		}
		for _, b := range o.Images {
			built = append(built, b.Tar)
		}
		s.workloadRef, s.mockGPUs = o.Workload, o.MockGPUs
		s.standins[toolkitRef] = built
	}
	return append([]string{s.gpupolicyTar}, built...)
}

// checkArchiveTag fails early when the image archive is not tagged as the stack names it:
// every pod would sit in ErrImageNeverPull/ImagePullBackOff instead.
func checkArchiveTag(tar, ref string) error {
	b, err := readArchiveManifest(tar)
	if err != nil {
		return err
	}
	if !strings.Contains(b, `"`+ref+`"`) {
		return fmt.Errorf("%s is not tagged %s (the image the rendered stack runs); manifest: %s", tar, ref, b)
	}
	return nil
}
