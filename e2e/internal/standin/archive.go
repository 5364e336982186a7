// Package standin builds the container images a real-node e2e test imports into containerd
// (`ctr -n k8s.io image import`) in place of images it cannot pull: no registry is reachable
// and there is no Docker engine. Each image is a docker-archive tarball with one layer of
// static Go programs (cmd/standin): the sandbox's pause, a stand-in for NVIDIA's container
// toolkit installer (which copies stand-ins of nvidia-container-runtime, nvidia-ctk and
// nvidia-cdi-hook to the host), and a workload that prints its environment.
package standin

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/gpupolicy/gpupolicy/e2e/internal/standin/layout"
)

// Image is what an archive holds: one layer made of Files, and the run configuration.
type Image struct {
	Ref        string          // the name containerd gives the image on import, e.g. registry.k8s.io/pause:3.10
	Files      map[string]File // absolute path in the image → file; missing parent directories are added (0755)
	Entrypoint []string
	Cmd        []string
	Env        []string // KEY=VALUE
	User       string
	WorkingDir string
}

// File is one entry of the layer. Mode carries the permission bits plus fs.ModeDir (a
// directory), fs.ModeSymlink (Content is the link target), and the special bits either as
// fs.ModeSticky, fs.ModeSetuid, fs.ModeSetgid or in chmod's octal (0o1777, 0o4755); anything
// else is a regular file.
type File struct {
	Content []byte
	Mode    fs.FileMode
}

// Dir is a directory entry with the given permissions, e.g. Dir(0o1777) for /tmp.
func Dir(perm fs.FileMode) File {
	return File{Mode: fs.ModeDir | perm&(fs.ModePerm|0o7000|fs.ModeSticky|fs.ModeSetuid|fs.ModeSetgid)}
}

// layerTime is every entry's mtime, so the same files give the same bytes (and digests).
var layerTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// WriteArchive writes img as a docker-archive tarball (what `docker save` writes and `ctr
// image import` reads) at path, atomically: a reader sees the old file or the whole new one.
// The same Image gives the same bytes.
func WriteArchive(path string, img Image) error {
	b, err := archiveBytes(img)
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Ref, err)
	}
	return layout.WriteFileAtomic(path, b, 0o644)
}

func archiveBytes(img Image) ([]byte, error) {
	if img.Ref == "" || strings.ContainsAny(img.Ref, " \t\n") {
		return nil, fmt.Errorf("field Ref: %q is not an image reference (e.g. registry.k8s.io/pause:3.10)", img.Ref)
	}
	if len(img.Entrypoint)+len(img.Cmd) == 0 {
		return nil, errors.New("neither Entrypoint nor Cmd is set: the image would run nothing")
	}
	layer, err := layerTar(img.Files)
	if err != nil {
		return nil, err
	}
	layerSum := sha256.Sum256(layer)
	layerHex := hex.EncodeToString(layerSum[:])
	config, err := json.Marshal(imageConfig{
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Created:      layerTime,
		Config: runConfig{
			Entrypoint: img.Entrypoint, Cmd: img.Cmd, Env: img.Env, User: img.User, WorkingDir: img.WorkingDir,
		},
		RootFS:  rootFS{Type: "layers", DiffIDs: []string{"sha256:" + layerHex}},
		History: []history{{Created: layerTime, CreatedBy: "gpupolicy e2e standin"}},
	})
	if err != nil {
		return nil, err
	}
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	layerName := layerHex + "/layer.tar"
	manifest, err := json.Marshal([]archiveManifest{{Config: configName, RepoTags: []string{img.Ref}, Layers: []string{layerName}}})
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for _, e := range []struct {
		name string
		body []byte
	}{{configName, config}, {layerName, layer}, {"manifest.json", manifest}} {
		if dir := path.Dir(e.name); dir != "." {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, ModTime: layerTime}); err != nil {
				return nil, err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: 0o644, Size: int64(len(e.body)), ModTime: layerTime}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// layerTar is the layer: files sorted by path (so parents precede children), owned by root,
// with fixed mtimes.
func layerTar(files map[string]File) ([]byte, error) {
	if len(files) == 0 {
		return nil, errors.New("no Files: the layer would be empty")
	}
	all := map[string]File{}
	for p, f := range files {
		if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
			return nil, fmt.Errorf("field Files[%q]: want a clean absolute path other than / (e.g. /pause)", p)
		}
		all[p] = f
	}
	for p := range files {
		for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
			if f, ok := all[dir]; !ok {
				all[dir] = Dir(0o755)
			} else if !f.Mode.IsDir() {
				return nil, fmt.Errorf("field Files[%q]: its parent %s is not a directory", p, dir)
			}
		}
	}
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for _, p := range slices.Sorted(maps.Keys(all)) {
		f := all[p]
		h := &tar.Header{Name: strings.TrimPrefix(p, "/"), Mode: tarMode(f.Mode), ModTime: layerTime, Format: tar.FormatPAX}
		switch {
		case f.Mode.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case f.Mode&fs.ModeSymlink != 0:
			h.Typeflag, h.Linkname = tar.TypeSymlink, string(f.Content)
		case f.Mode.Type() != 0:
			return nil, fmt.Errorf("field Files[%q]: mode %v: only regular files, directories and symlinks go into a layer", p, f.Mode)
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Content))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("field Files[%q]: %w", p, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Content); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// tarMode is a FileMode's permission and special bits in tar's (and stat's) encoding.
// fs.FileMode keeps its own bits above the low twelve, so chmod's octal 0o7000 is unambiguous.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m & (fs.ModePerm | 0o7000))
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

// The docker-archive's JSON documents: the image config (the OCI image config's fields that
// matter here) and the archive manifest.
type imageConfig struct {
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Created      time.Time `json:"created"`
	Config       runConfig `json:"config"`
	RootFS       rootFS    `json:"rootfs"`
	History      []history `json:"history"`
}

type runConfig struct {
	Entrypoint []string `json:"Entrypoint,omitempty"`
	Cmd        []string `json:"Cmd,omitempty"`
	Env        []string `json:"Env,omitempty"`
	User       string   `json:"User,omitempty"`
	WorkingDir string   `json:"WorkingDir,omitempty"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type history struct {
	Created   time.Time `json:"created"`
	CreatedBy string    `json:"created_by"`
}

type archiveManifest struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}
