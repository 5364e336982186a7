package standin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/gpupolicy/gpupolicy/e2e/internal/standin/layout"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/devices"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

// The image refs a real node needs besides gpupolicy's own image.
const (
	// DefaultPauseRef is the sandbox image; the node's containerd config sets sandbox_image to it.
	DefaultPauseRef = "registry.k8s.io/pause:3.10"
	// DefaultToolkitRef is the toolkit image gpupolicy renders by default (toolkit-copy).
	DefaultToolkitRef = "nvcr.io/nvidia/k8s/container-toolkit:v1.18.0"
	// DefaultWorkloadRef is the test workload.
	DefaultWorkloadRef = "gpupolicy.dev/e2e/workload:v1"
)

// What the stand-ins write on the node and print, for a test to read.
const (
	// RecordDir is where the nvidia-container-runtime stand-in records each created
	// container's OCI spec as <container-id>.json, and appends every call to CallLog (one JSON
	// array of its arguments a line); the nvidia-cdi-hook stand-in appends its runs to HookLog
	// (one JSON object a line: args, id, bundle).
	RecordDir = layout.RecordDir
	CallLog   = layout.CallLog
	HookLog   = layout.HookLog
	// RecordDirEnv and RuncEnv, in containerd's environment (the shim and the runtime inherit
	// it), move RecordDir and the runc the runtime stand-in execs (HostRunc): for tests only.
	RecordDirEnv = layout.RecordDirEnv
	RuncEnv      = layout.RuncEnv
	HostRunc     = layout.HostRunc
	// CDIDeviceEnv is set by each device of the nvidia-ctk stand-in's CDI spec to the device's
	// UUID (by "all" to every UUID, comma-separated); CDIDeviceEnv_<index>=<uuid> is set too.
	CDIDeviceEnv = layout.CDIDeviceEnv
	// EnvPrefix starts each environment line the workload prints ("standin-env: K=V");
	// WorkloadReady follows the last one.
	EnvPrefix     = layout.EnvPrefix
	WorkloadReady = layout.WorkloadReady
	// PauseReady is the line pause prints on stderr once SIGTERM ends it cleanly.
	PauseReady = layout.PauseReady
	// ToolkitSubdir is where, under TOOLKIT_INSTALL_DIR, the toolkit stand-in installs
	// ToolkitBinaries (as NVIDIA's installer: /usr/local/nvidia/toolkit).
	ToolkitSubdir = "toolkit"
)

// ToolkitBinaries are the programs the toolkit stand-in installs, sorted.
var ToolkitBinaries = append([]string(nil), layout.ToolkitBinaries...)

// MockGPUs is the GPUs' UUIDs of the device plugin's --nvml-mock dgxa100, in index order, as
// the device plugin enumerates them: the CDI device names the nvidia-ctk stand-in writes.
// They match the device plugin's only if gpumock derives UUIDs from the GPU index
// (TestMockGPUUUIDsAreStable); go-nvml's mock server draws random ones. The first answer is
// kept, so the images and the checks of one process agree either way.
func MockGPUs() ([]string, error) {
	mockGPUs.once.Do(func() { mockGPUs.uuids, mockGPUs.err = enumerateMock() })
	return slices.Clone(mockGPUs.uuids), mockGPUs.err
}

var mockGPUs struct {
	once  sync.Once
	uuids []string
	err   error
}

func enumerateMock() ([]string, error) {
	m, err := gpumock.New("dgxa100")
	if err != nil {
		return nil, err
	}
	gpus, skipped, err := devices.Enumerate(m, "/nonexistent")
	if err != nil {
		return nil, err
	}
	if len(skipped) > 0 || len(gpus) == 0 {
		return nil, fmt.Errorf("the dgxa100 mock enumerated %d GPUs and skipped %v", len(gpus), skipped)
	}
	uuids := make([]string, len(gpus))
	for i, g := range gpus {
		uuids[i] = g.UUID
	}
	return uuids, nil
}

// Refs names the images; an empty field takes its Default*Ref.
type Refs struct {
	Pause, Toolkit, Workload string
}

func (r Refs) withDefaults() Refs {
	if r.Pause == "" {
		r.Pause = DefaultPauseRef
	}
	if r.Toolkit == "" {
		r.Toolkit = DefaultToolkitRef
	}
	if r.Workload == "" {
		r.Workload = DefaultWorkloadRef
	}
	return r
}

// Built is one image archive, ready for `ctr -n k8s.io image import Tar`.
type Built struct {
	Ref, Tar string
}

// Images are the stand-in images, each holding bin (cmd/standin) under the names it runs
// as: pause, the toolkit installer (entrypoint) with the binaries it copies, and the workload.
func Images(refs Refs, bin []byte) []Image {
	refs = refs.withDefaults()
	exe := func(b []byte) File { return File{Content: b, Mode: 0o755} }
	toolkit := map[string]File{
		layout.ToolkitInstaller: exe(bin),
		"/tmp":                  Dir(0o1777),
	}
	for _, name := range layout.ToolkitBinaries {
		toolkit[layout.ToolkitArtifacts+"/"+name] = exe(bin)
	}
	return []Image{
		{Ref: refs.Pause, Files: map[string]File{"/pause": exe(bin)}, Entrypoint: []string{"/pause"}, User: "65535:65535"},
		{Ref: refs.Toolkit, Files: toolkit, Entrypoint: []string{layout.ToolkitInstaller},
			Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
		{Ref: refs.Workload, Files: map[string]File{"/workload": exe(bin), "/tmp": Dir(0o1777)}, Entrypoint: []string{"/workload"},
			Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
	}
}

// Build compiles cmd/standin (static, with the mock's GPU UUIDs linked in) into outDir and
// writes one archive per image there, in the order of Images. It reuses Go's build cache, so
// only the first build on a machine compiles.
func Build(ctx context.Context, outDir string, refs Refs) ([]Built, error) {
	bin, err := BuildBinary(ctx, outDir)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var built []Built
	for _, img := range Images(refs, b) {
		tar := filepath.Join(outDir, archiveName(img.Ref))
		if err := WriteArchive(tar, img); err != nil {
			return nil, err
		}
		built = append(built, Built{Ref: img.Ref, Tar: tar})
	}
	return built, nil
}

// BuildAll is Build with the default pause and workload refs and the caller's toolkit ref
// (the one the rendered stack names; "" takes DefaultToolkitRef).
func BuildAll(ctx context.Context, outDir, toolkitRef string) ([]Built, error) {
	return Build(ctx, outDir, Refs{Toolkit: toolkitRef})
}

// BuildBinary builds cmd/standin as outDir/standin and returns its path.
func BuildBinary(ctx context.Context, outDir string) (string, error) {
	uuids, err := MockGPUs()
	if err != nil {
		return "", err
	}
	src, err := sourceDir()
	if err != nil {
		return "", err
	}
	out := filepath.Join(outDir, "standin")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out,
		"-ldflags", "-s -w -X main.gpuUUIDs="+strings.Join(uuids, ","), "./cmd/standin")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/standin in %s: %w\n%s", src, err, stderr.String())
	}
	return out, nil
}

// sourceDir is this package's directory, where go build finds ./cmd/standin in the e2e module.
func sourceDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return "", errors.New("cannot locate package standin's source (built with -trimpath?): BuildBinary runs go build in it")
	}
	return filepath.Dir(file), nil
}

// archiveName is a file name for ref: registry.k8s.io/pause:3.10 → registry.k8s.io_pause_3.10.tar.
func archiveName(ref string) string {
	return strings.NewReplacer("/", "_", ":", "_", "@", "_").Replace(ref) + ".tar"
}
