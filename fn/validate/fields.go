package validate

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/distribution/reference"

	"github.com/gpupolicy/gpupolicy/fn/render"
)

// registryHost is spec.registry: a host[:port] with an optional path, the grammar of
// github.com/distribution/reference's domain and path components.
var registryHost = regexp.MustCompile(`^` + reference.DomainRegexp.String() + `(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$`)

// digestAlone matches a pasted digest with no repository ("sha256:<hex>"), which the
// reference grammar reads as repository "sha256" with the hex as its tag.
var digestAlone = regexp.MustCompile(`^(sha256|sha384|sha512):[0-9a-fA-F]{32,}$`)

// imageProblem parses v with the real reference parser (github.com/distribution/reference, as
// the kubelet and containerd do) and says what is wrong with it and how to fix it; "" when v is
// an image reference. what names the field's kind ("an image repository") and example is a
// correct value for it.
func imageProblem(v, what, example string) (reference.Reference, string) {
	if digestAlone.MatchString(v) {
		algo, hex, _ := strings.Cut(v, ":")
		return nil, fmt.Sprintf("%q is a digest alone, which would be read as repository %q with tag %q: write the repository before it, REPOSITORY@%s, e.g. %q",
			v, algo, hex, v, example)
	}
	if _, digest, ok := strings.Cut(v, "@"); ok && !sha256Digest.MatchString(digest) {
		return nil, fmt.Sprintf("digest %q is not sha256:<64 lower-case hex digits>, the only digest containerd and the kubelet resolve: copy the image's digest whole from the registry (e.g. `crane digest IMAGE`), as REPOSITORY@sha256:...", digest)
	}
	ref, err := reference.Parse(v)
	switch {
	case err == nil:
		return ref, ""
	case errors.Is(err, reference.ErrNameContainsUppercase):
		return nil, fmt.Sprintf("%q: a repository name must be lower case (registries and the kubelet refuse it): write %q", v, lowerRepository(v))
	case errors.Is(err, reference.ErrTagInvalidFormat):
		return nil, fmt.Sprintf("%q has an invalid tag: a tag is up to 128 letters, digits, '_', '.' and '-', not starting with '.' or '-', e.g. %q", v, example)
	case errors.Is(err, reference.ErrNameTooLong):
		repo, _, _ := strings.Cut(v, "@")
		if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
			repo = repo[:i]
		}
		return nil, fmt.Sprintf("%s: the kubelet would refuse the image on every node (InvalidImageName); use a shorter registry or path", render.ReferenceLimit(repo))
	}
	return nil, fmt.Sprintf("%q is not %s (%v): write registry/path in lower case, e.g. %q", v, what, err, example)
}

// lowerRepository lower-cases the repository part of v, keeping its tag and digest.
func lowerRepository(v string) string {
	rest, digest, _ := strings.Cut(v, "@")
	repo, tag := rest, ""
	if i := strings.LastIndex(rest, ":"); i > strings.LastIndex(rest, "/") {
		repo, tag = rest[:i], rest[i:]
	}
	out := strings.ToLower(repo) + tag
	if digest != "" {
		out += "@" + digest
	}
	return out
}

func (c *checker) dnsLabel(p *field.Path, v string) bool {
	return c.k8sName(p, v, validation.IsDNS1123Label(v), "a DNS-1123 label (lower case letters, digits and '-', starting and ending with a letter or digit, at most 63 characters), e.g. \"gpu-system\"")
}

func (c *checker) dnsSubdomain(p *field.Path, v string) bool {
	return c.k8sName(p, v, validation.IsDNS1123Subdomain(v), "a DNS-1123 subdomain (lower case letters, digits, '-' and '.', at most 253 characters), e.g. \"fleet\"")
}

func (c *checker) k8sName(p *field.Path, v string, problems []string, want string) bool {
	if len(problems) == 0 {
		return true
	}
	detail := ""
	if strings.Contains(problems[0], "no more than") {
		detail = " (" + problems[0] + ")"
	}
	c.errorf(p, v, "%q is not a valid name%s: it must be %s", v, detail, want)
	return false
}

// brief drops the regular expression and examples apimachinery appends to its messages; ours
// carry their own example.
func brief(problems []string) string {
	out := make([]string, len(problems))
	for i, pr := range problems {
		if j := strings.Index(pr, " (e.g."); j > 0 {
			pr = pr[:j]
		}
		out[i] = pr
	}
	return strings.Join(out, "; ")
}

// labelMap checks label keys and values (node selectors, metadata labels) in sorted key order.
func (c *checker) labelMap(p *field.Path, m map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		kp := p.Key(k)
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			c.errorf(kp, k, "label key %q is invalid: %s; use an optional DNS prefix and a name of letters, digits, '-', '_' and '.', e.g. \"nvidia.com/gpu.present\"", k, brief(errs))
		}
		if errs := validation.IsValidLabelValue(m[k]); len(errs) > 0 {
			c.errorf(kp, m[k], "label value %q is invalid: %s; use at most 63 letters, digits, '-', '_' or '.', e.g. \"true\"", m[k], brief(errs))
		}
	}
}

// hostPath checks a path on the node: absolute and clean, because the node agent joins it
// under --host-root and a relative or ".." path would escape it. The example is the field's
// default, the path to write when the root itself was named.
func (c *checker) hostPath(p *field.Path, v, example string) bool {
	switch {
	case !strings.HasPrefix(v, "/"):
		c.errorf(p, v, "%q must be an absolute path on the node, e.g. %q", v, "/"+strings.TrimLeft(v, "./"))
	case path.Clean(v) == "/":
		c.errorf(p, v, "%q is the root of the node's file system, not a path below it: name the file or directory itself, e.g. %q (the default)", v, example)
	case path.Clean(v) != v:
		c.errorf(p, v, "%q must be a clean absolute path below / (no '..', '.', '//' or trailing '/'): write %q", v, path.Clean(v))
	default:
		return true
	}
	return false
}

// duration checks a Go duration of at least lo; below warnBelow is a warning. It returns the
// duration and whether it parsed and is at least lo, for the caller's upper bound.
func (c *checker) duration(p *field.Path, v string, lo, warnBelow time.Duration) (time.Duration, bool) {
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		c.errorf(p, v, "%q is not a duration: write a Go duration such as \"15s\" or \"1m\"", v)
		return 0, false
	case d < lo:
		c.errorf(p, v, "%s is too short: use at least %s", v, lo)
		return d, false
	case d < warnBelow:
		c.warnf(p, v, "%s polls NVML very often and costs GPU node CPU; %s or more is usual", v, warnBelow)
	}
	return d, true
}

// repository checks an image repository without tag or digest (the function appends them).
func (c *checker) repository(p *field.Path, v, tagFrom string) {
	const example = "nvcr.io/nvidia/driver"
	ref, why := imageProblem(v, "an image repository", example)
	if why != "" {
		c.errorf(p, v, "%s", why)
		return
	}
	named, _ := ref.(reference.Named)
	_, tagged := ref.(reference.Tagged)
	_, digested := ref.(reference.Digested)
	if tagged || digested {
		c.errorf(p, v, "%q carries a tag or digest: give the repository only, e.g. %q; the tag comes from %s", v, named.Name(), tagFrom)
		return
	}
	if why := render.ReferenceLimit(v); why != "" {
		c.errorf(p, v, "%s: the kubelet would refuse the image on every node (InvalidImageName); use a shorter registry or path", why)
	}
}

// pinnedImage checks a full image reference that must carry a tag or digest; a digest must be
// sha256:<64 lower-case hex digits> (a release pins the image by it: examples/github-actions).
func (c *checker) pinnedImage(p *field.Path, v string) {
	const example = "ghcr.io/gpupolicy/gpupolicy:v0.1.0"
	ref, why := imageProblem(v, "an image reference", example)
	if why != "" {
		c.errorf(p, v, "%s", why)
		return
	}
	named, _ := ref.(reference.Named)
	tagged, isTagged := ref.(reference.Tagged)
	_, isDigested := ref.(reference.Digested)
	switch {
	case !isTagged && !isDigested:
		c.errorf(p, v, "%q has no tag or digest: pin it (\"%s:v0.1.0\" or @sha256:...) so the rendered output is reproducible", v, v)
	case isTagged && !isDigested && tagged.Tag() == "latest":
		c.warnf(p, v, "%q uses the moving tag latest: nodes may run different builds; pin a version tag or digest", v)
	}
	if named != nil {
		if why := render.ReferenceLimit(named.Name()); why != "" {
			c.errorf(p, v, "%s: the kubelet would refuse the image on every node (InvalidImageName); use a shorter registry or path", why)
		}
	}
}

// sha256Digest is the only digest form containerd and the kubelet resolve: the OCI
// registries' content address, lower-case hex.
var sha256Digest = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

func (c *checker) tolerations(p *field.Path, ts []corev1.Toleration) {
	for i, t := range ts {
		tp := p.Index(i)
		if t.Key != "" {
			if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
				c.errorf(tp.Child("key"), t.Key, "toleration key %q is invalid: %s; use the taint's key, e.g. \"nvidia.com/gpu\"", t.Key, brief(errs))
			}
		}
		switch t.Operator {
		case "", corev1.TolerationOpEqual:
			if t.Key == "" {
				c.errorf(tp.Child("operator"), string(t.Operator), "an empty key needs operator: Exists (it then tolerates every taint)")
			}
			if errs := validation.IsValidLabelValue(t.Value); len(errs) > 0 {
				c.errorf(tp.Child("value"), t.Value, "toleration value %q is invalid: %s; use the taint's value", t.Value, brief(errs))
			}
		case corev1.TolerationOpExists:
			if t.Value != "" {
				c.errorf(tp.Child("value"), t.Value, "operator Exists takes no value: remove value or use operator: Equal")
			}
		default:
			c.oneOf(tp.Child("operator"), string(t.Operator), "Equal", "Exists")
		}
		switch t.Effect {
		case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			c.oneOf(tp.Child("effect"), string(t.Effect), "NoSchedule", "PreferNoSchedule", "NoExecute")
		}
		if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
			c.errorf(tp.Child("tolerationSeconds"), *t.TolerationSeconds, "tolerationSeconds only applies to effect NoExecute: remove it or set effect: NoExecute")
		}
	}
}
