package ociartifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/gpupolicy/gpupolicy/fn/internal/fntest"
)

func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	fntest.WriteFiles(t, dir, files)
	return dir
}

// TestPackFormat: the manifest, config and layer have Flux's media types and annotations, and
// the layer is the tree with owners and times cleared.
func TestPackFormat(t *testing.T) {
	dir := writeTree(t, map[string]string{"kustomization.yaml": "resources: []\n", "00-prereqs/ns.yaml": "kind: Namespace\n"})
	meta := Metadata{Source: "https://example.com/fleet.git", Revision: "main@sha1:0123456789abcdef0123456789abcdef01234567", Created: time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)}
	a, err := Pack(dir, meta)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		SchemaVersion int
		MediaType     string
		Config        Descriptor
		Layers        []Descriptor
		Annotations   map[string]string
	}
	if err := json.Unmarshal(a.Manifest.Data, &m); err != nil {
		t.Fatal(err)
	}
	if m.SchemaVersion != 2 || m.MediaType != ManifestMediaType || m.Config.MediaType != "application/vnd.cncf.flux.config.v1+json" ||
		len(m.Layers) != 1 || m.Layers[0].MediaType != "application/vnd.cncf.flux.content.v1.tar+gzip" || m.Layers[0] != a.Layer.Descriptor || m.Config != a.Config.Descriptor {
		t.Errorf("manifest %s", a.Manifest.Data)
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.source":   meta.Source,
		"org.opencontainers.image.revision": meta.Revision,
		"org.opencontainers.image.created":  "2026-12-07T10:00:00Z",
	} {
		if m.Annotations[k] != v {
			t.Errorf("annotation %s = %q; want %q", k, m.Annotations[k], v)
		}
	}
	zr, err := gzip.NewReader(bytes.NewReader(a.Layer.Data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(time.Unix(0, 0)) && !h.ModTime.IsZero() || h.Uid != 0 || h.Uname != "" {
			t.Errorf("%s: times or owner kept: %v %d %q", h.Name, h.ModTime, h.Uid, h.Uname)
		}
		names = append(names, h.Name)
	}
	if want := []string{".", "00-prereqs", "00-prereqs/ns.yaml", "kustomization.yaml"}; !slices.Equal(names, want) {
		t.Errorf("layer holds %v; want %v", names, want)
	}
}

// TestPackReproducible: the same tree gives the same layer digest wherever it was written and
// when; the same creation time gives the same manifest digest; a changed byte changes both.
func TestPackReproducible(t *testing.T) {
	files := map[string]string{"a.yaml": "a\n", "d/b.yaml": "b\n"}
	meta := Metadata{Source: "s", Revision: "main@sha1:1", Created: time.Unix(1_800_000_000, 0)}
	first, err := Pack(writeTree(t, files), meta)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // other mtimes
	second, err := Pack(writeTree(t, files), meta)
	if err != nil {
		t.Fatal(err)
	}
	if first.Layer.Descriptor != second.Layer.Descriptor || first.Manifest.Descriptor != second.Manifest.Descriptor {
		t.Errorf("two packs of the same tree differ: %+v %+v", first.Manifest.Descriptor, second.Manifest.Descriptor)
	}
	files["d/b.yaml"] = "c\n"
	third, err := Pack(writeTree(t, files), meta)
	if err != nil {
		t.Fatal(err)
	}
	if third.Layer.Descriptor.Digest == first.Layer.Descriptor.Digest || third.Manifest.Descriptor.Digest == first.Manifest.Descriptor.Digest {
		t.Error("a changed file kept the digests")
	}
}

func TestCheckTag(t *testing.T) {
	for tag, ok := range map[string]bool{"v1": true, "main-1a2b3c4": true, "_x": true, ".x": false, "-x": false, "a/b": false, "": false, string(make([]byte, 129)): false} {
		if err := CheckTag(tag); (err == nil) != ok {
			t.Errorf("CheckTag(%q) = %v", tag, err)
		}
	}
}
