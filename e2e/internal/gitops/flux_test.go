package gitops

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// The served artifact is what kustomize-controller verifies and unpacks: its sha256 is the
// digest in status.artifact, and its entries are the tree's files relative to the root.
func TestPublishServesVerifiableTarball(t *testing.T) {
	dir := t.TempDir()
	for p, body := range map[string]string{"gpu/flux/a.yaml": "a: 1\n", "gpu/01-driver/b.yaml": "b: 2\n"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := NewArtifactServer()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	art, err := s.Publish(dir)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(art.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	sum := sha256.Sum256(b)
	if resp.StatusCode != 200 || "sha256:"+hex.EncodeToString(sum[:]) != art.Digest || int64(len(b)) != art.Size {
		t.Fatalf("GET %s: %d, %d bytes, digest mismatch with %+v", art.URL, resp.StatusCode, len(b), art)
	}
	again, err := s.Publish(dir)
	if err != nil || again.Digest != art.Digest {
		t.Errorf("the same tree gave another artifact: %+v vs %+v (%v)", again, art, err)
	}
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	if len(names) != 2 || names[0] != "gpu/01-driver/b.yaml" || names[1] != "gpu/flux/a.yaml" {
		t.Errorf("tarball entries %v", names)
	}
}
