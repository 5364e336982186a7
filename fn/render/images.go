package render

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// images are the resolved, pinned references of every image the output runs.
type images struct {
	gpupolicy string // this project's image: node agent, device plugin, exporter
	driver    string // NVIDIA's driver image (driver.source=container)
	toolkit   string // NVIDIA's toolkit image (toolkit.source=container)
}

func resolveImages(s *v1alpha1.Spec) (images, error) {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	gp := s.Images.GPUPolicy
	if err := checkPinned(gp); err != "" {
		errs = append(errs, field.Invalid(spec.Child("images", "gpupolicy"), gp, err))
	}
	for _, repo := range []struct {
		path  *field.Path
		value string
	}{
		{spec.Child("driver", "image"), s.Driver.Image},
		{spec.Child("toolkit", "image"), s.Toolkit.Image},
	} {
		if _, tag, digest := splitImage(repo.value); tag != "" || digest != "" {
			errs = append(errs, field.Invalid(repo.path, repo.value,
				"must be a repository without tag or digest: the tag is derived from the version field next to it"))
		}
	}
	// Only source=container runs the driver image.
	if _, err := config.CheckDriverVersion(s.Driver.Version); err != nil && s.Driver.Source == v1alpha1.SourceContainer {
		errs = append(errs, field.Invalid(spec.Child("driver", "version"), s.Driver.Version, err.Error()))
	}
	if len(errs) > 0 {
		return images{}, v1alpha1.FieldErrors(errs)
	}
	for i := range s.NodePools {
		np := &s.NodePools[i]
		d, own := s.PoolDriver(np)
		if !own {
			continue
		}
		dp := spec.Child("nodePools").Index(i).Child("driver")
		if _, tag, digest := splitImage(np.Driver.Image); tag != "" || digest != "" {
			errs = append(errs, field.Invalid(dp.Child("image"), np.Driver.Image,
				"must be a repository without tag or digest: the tag is derived from the pool's driver version"))
		}
		if _, err := config.CheckDriverVersion(d.Version); err != nil && d.Source == v1alpha1.SourceContainer {
			errs = append(errs, field.Invalid(dp.Child("version"), d.Version, err.Error()))
		}
	}
	if len(errs) > 0 {
		return images{}, v1alpha1.FieldErrors(errs)
	}
	return images{
		gpupolicy: Mirror(s.Registry, gp),
		driver:    DriverImage(s.Registry, s.Driver),
		// and its toolkit images v<version>.
		toolkit: Mirror(s.Registry, s.Toolkit.Image+":v"+strings.TrimPrefix(s.Toolkit.Version, "v")),
	}, nil
}

// DriverImage is the driver image of d: NVIDIA tags its driver images <version>-<os>
// ("580.95.05-ubuntu24.04"), the version spelt as the node agent's rule writes it (validation
// refuses any other spelling).
func DriverImage(registry string, d v1alpha1.Driver) string {
	tag := d.Version
	if v, err := config.CheckDriverVersion(d.Version); err == nil {
		tag = v.String()
	}
	return Mirror(registry, d.Image+":"+tag+"-"+d.OS)
}

// driverImage is DriverImage under the policy's registry.
func (c *plan) driverImage(d v1alpha1.Driver) string { return DriverImage(c.p.Spec.Registry, d) }

// Limits of the reference grammar that its regular expression does not carry: a repository
// name (registry host and path) is at most 255 characters, a host label at most 63 (DNS), a
// port 1–65535. Past them the kubelet reports InvalidImageName on every node.
const (
	maxRepositoryName = 255
	maxHostLabel      = 63
)

// ReferenceLimit says how repo (a repository name, with or without its registry host) breaks
// those limits, or "".
func ReferenceLimit(repo string) string {
	if len(repo) > maxRepositoryName {
		return fmt.Sprintf("the repository name is %d characters, over the limit of %d of image references", len(repo), maxRepositoryName)
	}
	host, _, ok := strings.Cut(repo, "/")
	if !ok || !strings.ContainsAny(host, ".:") && host != "localhost" {
		return "" // no registry host: a Docker Hub path
	}
	name, port, hasPort := strings.Cut(host, ":")
	if hasPort {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Sprintf("port %s of registry %s is not a TCP port (1–65535)", port, host)
		}
	}
	for _, label := range strings.Split(name, ".") {
		if len(label) > maxHostLabel {
			return fmt.Sprintf("the host label %.20s… is %d characters, over DNS's limit of %d", label, len(label), maxHostLabel)
		}
	}
	return ""
}

// checkPinned returns why ref is not pinned, or "". A floating tag would let two nodes run
// different code from one reviewed manifest.
func checkPinned(ref string) string {
	_, tag, digest := splitImage(ref)
	switch {
	case digest != "":
		return ""
	case tag == "":
		return "must carry a tag or digest (e.g. " + v1alpha1.DefaultGPUPolicyImage() + "): an untagged image floats"
	case tag == "latest":
		return "the tag latest floats: pin a version tag or a digest"
	}
	return ""
}

// splitImage splits "host/path:tag@digest" into repository, tag and digest.
func splitImage(ref string) (repo, tag, digest string) {
	repo, digest, _ = strings.Cut(ref, "@")
	// A colon after the last slash is a tag; one before it is a registry port.
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo, tag = repo[:i], repo[i+1:]
	}
	return repo, tag, digest
}

// Mirror replaces the registry host of ref with registry (which may carry a path, e.g.
// "mirror.example.com/nvcr"). A reference without a registry host is a Docker Hub image.
func Mirror(registry, ref string) string {
	if registry == "" {
		return ref
	}
	path := ref
	if host, rest, ok := strings.Cut(ref, "/"); ok && (strings.ContainsAny(host, ".:") || host == "localhost") {
		path = rest
	} else if !ok {
		path = "library/" + ref
	}
	return strings.TrimSuffix(registry, "/") + "/" + path
}
