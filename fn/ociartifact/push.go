package ociartifact

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/retry"
)

// Target is where artifacts go and how to reach the registry.
type Target struct {
	// Repository is the repository without scheme or tag: registry.example.com/fleet/prod-eu.
	Repository string
	// PlainHTTP talks HTTP instead of HTTPS (a registry on loopback or in a lab).
	PlainHTTP bool
	// Username and Password are basic credentials, or none. Token registries (ghcr.io,
	// Docker Hub) take them too: the client follows the registry's challenge.
	Username, Password string
}

// tagPattern is the distribution spec's tag grammar.
var tagPattern = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)

// CheckTag refuses what a registry would refuse as a tag, before anything is pushed.
func CheckTag(tag string) error {
	if !tagPattern.MatchString(tag) {
		return fmt.Errorf("tag %q is not an OCI tag (letters, digits, '_', '.', '-', at most 128, not starting with '.' or '-'): use e.g. the commit, %q", tag, "main-1a2b3c4")
	}
	return nil
}

// Push uploads the artifact's blobs (each once: what the registry already has is skipped,
// so an unchanged cluster's layer is not sent again) and then tags the manifest. It returns
// the manifest's digest.
func Push(ctx context.Context, a *Artifact, t Target, tag string) (string, error) {
	if err := CheckTag(tag); err != nil {
		return "", err
	}
	repo, err := remote.NewRepository(t.Repository)
	if err != nil {
		return "", fmt.Errorf("%s: %w", t.Repository, err)
	}
	repo.PlainHTTP = t.PlainHTTP
	client := &auth.Client{Client: retry.DefaultClient, Cache: auth.NewCache(), Header: http.Header{"User-Agent": {"gpupolicy-fn"}}}
	if t.Username != "" || t.Password != "" {
		host := t.Repository
		if i := strings.IndexByte(host, '/'); i >= 0 {
			host = host[:i]
		}
		client.Credential = auth.StaticCredential(host, auth.Credential{Username: t.Username, Password: t.Password})
	}
	repo.Client = client
	for _, b := range []Blob{a.Layer, a.Config} {
		desc := b.Descriptor.oci()
		ok, err := repo.Exists(ctx, desc)
		if err != nil {
			return "", fmt.Errorf("%s: %w", t.Repository, err)
		}
		if ok {
			continue
		}
		if err := repo.Push(ctx, desc, bytes.NewReader(b.Data)); err != nil {
			return "", fmt.Errorf("%s: pushing %s: %w", t.Repository, b.Descriptor.MediaType, err)
		}
	}
	if err := repo.PushReference(ctx, a.Manifest.Descriptor.oci(), bytes.NewReader(a.Manifest.Data), tag); err != nil {
		return "", fmt.Errorf("%s:%s: pushing the manifest: %w", t.Repository, tag, err)
	}
	return a.Manifest.Descriptor.Digest, nil
}

func (d Descriptor) oci() ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: d.MediaType, Digest: digest.Digest(d.Digest), Size: d.Size}
}
