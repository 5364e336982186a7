// Package ociartifact packs a rendered tree as an OCI artifact in the format `flux push
// artifact` writes (fluxcd/pkg/oci v0.74.0: an OCI image manifest whose config has Flux's
// config media type and whose one layer is a gzip tarball of the directory with Flux's content
// media type, annotated with the source, revision and creation time) and pushes it to a
// registry, so source-controller's OCIRepository reads it as it reads Flux's own. The pack is
// reproducible: the same tree gives the same layer digest (timestamps, owners and names are
// cleared as Flux's tar package clears them), and with the same creation time the same
// manifest digest.
package ociartifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// The media types and annotations of Flux's artifacts (fluxcd/pkg/oci globals.go, constants.go).
const (
	ManifestMediaType  = "application/vnd.oci.image.manifest.v1+json"
	ConfigMediaType    = "application/vnd.cncf.flux.config.v1+json"
	ContentMediaType   = "application/vnd.cncf.flux.content.v1.tar+gzip"
	SourceAnnotation   = "org.opencontainers.image.source"
	RevisionAnnotation = "org.opencontainers.image.revision"
	CreatedAnnotation  = "org.opencontainers.image.created"
)

// Metadata is what the manifest says about the artifact's origin.
type Metadata struct {
	Source   string    // where the content came from, e.g. the Git repository's URL
	Revision string    // which version of it, Flux's form: main@sha1:<commit>
	Created  time.Time // when it was made; the same time gives the same manifest digest
}

// Blob is content and its descriptor.
type Blob struct {
	Descriptor Descriptor
	Data       []byte
}

// Descriptor is an OCI content descriptor.
type Descriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

func blob(mediaType string, data []byte) Blob {
	sum := sha256.Sum256(data)
	return Blob{Descriptor: Descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}, Data: data}
}

// Artifact is a packed directory: the manifest, its config and its one layer.
type Artifact struct {
	Manifest, Config, Layer Blob
}

// Pack makes the artifact of dir.
func Pack(dir string, meta Metadata) (*Artifact, error) {
	tarball, diffID, err := Tarball(dir)
	if err != nil {
		return nil, err
	}
	created := meta.Created.UTC().Format(time.RFC3339)
	// The config go-containerregistry writes for Flux (an empty image's, with the created time
	// and the layer's diff ID); source-controller reads only the manifest and the layer.
	config, err := json.Marshal(map[string]any{
		"architecture": "",
		"created":      created,
		"os":           "",
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{diffID}},
		"config":       map[string]any{},
	})
	if err != nil {
		return nil, err
	}
	a := &Artifact{Config: blob(ConfigMediaType, config), Layer: blob(ContentMediaType, tarball)}
	manifest, err := json.Marshal(struct {
		SchemaVersion int               `json:"schemaVersion"`
		MediaType     string            `json:"mediaType"`
		Config        Descriptor        `json:"config"`
		Layers        []Descriptor      `json:"layers"`
		Annotations   map[string]string `json:"annotations"`
	}{2, ManifestMediaType, a.Config.Descriptor, []Descriptor{a.Layer.Descriptor}, map[string]string{
		CreatedAnnotation:  created,
		SourceAnnotation:   meta.Source,
		RevisionAnnotation: meta.Revision,
	}})
	if err != nil {
		return nil, err
	}
	a.Manifest = blob(ManifestMediaType, manifest)
	return a, nil
}

// Tarball is dir as Flux's tar package writes it: every directory and regular file in walk
// order, names relative to dir, owners, names and times cleared, gzip-compressed. It also
// returns the diff ID (the digest of the uncompressed tar).
func Tarball(dir string) ([]byte, string, error) {
	var gz bytes.Buffer
	gw := gzip.NewWriter(&gz)
	raw := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(gw, raw))
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if t := d.Type(); !t.IsRegular() && !t.IsDir() {
			return nil // links and devices: Flux skips them too
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		h.ModTime, h.AccessTime, h.ChangeTime = time.Time{}, time.Time{}, time.Time{}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = gw.Close()
	}
	if err != nil {
		return nil, "", fmt.Errorf("packing %s: %w", dir, err)
	}
	return gz.Bytes(), "sha256:" + hex.EncodeToString(raw.Sum(nil)), nil
}
