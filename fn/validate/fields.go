package validate

import (
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpupolicy/gpupolicy/fn/render"
)

// The image reference grammar of github.com/distribution/reference, written out so the module
// needs no extra dependency for one regular expression.
const (
	domainComponent = `(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`
	domainRE        = domainComponent + `(?:\.` + domainComponent + `)*(?::[0-9]+)?`
	pathComponent   = `[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*`
	repositoryRE    = `(?:` + domainRE + `/)?` + pathComponent + `(?:/` + pathComponent + `)*`
	tagRE           = `[\w][\w.-]*` // at most maxTagLen: checked in matchImageRef (see there)
	digestRE        = `[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}`
)

// maxTagLen is the grammar's bound on a tag, [\w][\w.-]{0,127}.
const maxTagLen = 128

var (
	repositoryOnly = regexp.MustCompile(`^` + repositoryRE + `$`)
	imageRef       = regexp.MustCompile(`^(` + repositoryRE + `)(?::(` + tagRE + `))?(?:@(` + digestRE + `))?$`)
	registryHost   = regexp.MustCompile(`^` + domainRE + `(?:/` + pathComponent + `)*$`)
)

// matchImageRef is imageRef's submatches of v (1 repository, 2 tag, 3 digest), nil when v is
// no image reference. The tag's length is checked here rather than by a counted repetition in
// the expression: {0,127} compiled into 135 KB of program and a tenth of a millisecond, paid by
// every gpupolicy-fn process at start. The tag is the text after the last ':' that no '/'
// follows (its characters hold neither ':', '/' nor '@'), so the language is the grammar's.
func matchImageRef(v string) []string {
	m := imageRef.FindStringSubmatch(v)
	if m == nil || len(m[2]) > maxTagLen {
		return nil
	}
	return m
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
	if repositoryOnly.MatchString(v) {
		if why := render.ReferenceLimit(v); why != "" {
			c.errorf(p, v, "%s: the kubelet would refuse the image on every node (InvalidImageName); use a shorter registry or path", why)
		}
		return
	}
	if m := matchImageRef(v); m != nil {
		c.errorf(p, v, "%q carries a tag or digest: give the repository only, e.g. %q; the tag comes from %s", v, m[1], tagFrom)
		return
	}
	c.errorf(p, v, "%q is not an image repository: write registry/path in lower case, e.g. \"nvcr.io/nvidia/driver\"", v)
}

// sha256Digest is the only digest form containerd and the kubelet resolve: the OCI
// registries' content address, lower-case hex.
var sha256Digest = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// pinnedImage checks a full image reference that must carry a tag or digest; a digest must be
// sha256:<64 lower-case hex digits> (a release pins the image by it: examples/github-actions).
func (c *checker) pinnedImage(p *field.Path, v string) {
	if _, digest, ok := strings.Cut(v, "@"); ok && !sha256Digest.MatchString(digest) {
		c.errorf(p, v, "digest %q is not sha256:<64 lower-case hex digits>: copy the image's digest whole from the registry (e.g. `docker buildx imagetools inspect IMAGE`), as REPOSITORY@sha256:...", digest)
		return
	}
	m := matchImageRef(v)
	switch {
	case m == nil:
		c.errorf(p, v, "%q is not an image reference: write registry/repository:tag or @sha256:digest, e.g. \"ghcr.io/gpupolicy/gpupolicy:v0.1.0\"", v)
	case m[2] == "" && m[3] == "":
		c.errorf(p, v, "%q has no tag or digest: pin it (\"%s:v0.1.0\" or @sha256:...) so the rendered output is reproducible", v, v)
	case m[2] == "latest" && m[3] == "":
		c.warnf(p, v, "%q uses the moving tag latest: nodes may run different builds; pin a version tag or digest", v)
	}
	if m != nil {
		if why := render.ReferenceLimit(m[1]); why != "" {
			c.errorf(p, v, "%s: the kubelet would refuse the image on every node (InvalidImageName); use a shorter registry or path", why)
		}
	}
}

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
