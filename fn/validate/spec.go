package validate

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// Version formats of the contract. Near misses ("v1.34", "1.34.2", "2.1.3") get a suggestion.
var (
	kubeMinorRE    = regexp.MustCompile(`^1\.[0-9]{1,3}$`)
	kubeNearRE     = regexp.MustCompile(`^v?(1\.[0-9]{1,3})(\.[0-9]+)?$`)
	minorRE        = regexp.MustCompile(`^[0-9]{1,3}\.[0-9]{1,3}$`)
	minorNearRE    = regexp.MustCompile(`^v?([0-9]{1,3}\.[0-9]{1,3})(\.[0-9]+)?$`)
	cudaRE         = regexp.MustCompile(`^[0-9]{1,3}\.[0-9]{1,3}(\.[0-9]{1,3})?$`)
	semverRE       = regexp.MustCompile(`^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$`)
	semverNearRE   = regexp.MustCompile(`^v([0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3})$`)
	driverOSRE     = regexp.MustCompile(`^[a-z]+[0-9]+(\.[0-9]+)*$`)
	gateLabelRE    = regexp.MustCompile(`^nvidia\.com/gpu\.(deploy\.|toolkit\.ready$)`)
	minExporterGap = time.Second
)

// versionFormat checks a version string against re; near matches get the fix spelled out.
func (c *checker) versionFormat(p *field.Path, v string, re, near *regexp.Regexp, example string) bool {
	if re.MatchString(v) {
		return true
	}
	if near != nil {
		if m := near.FindStringSubmatch(v); m != nil {
			c.errorf(p, v, "%q: write it as %q; the field takes %s", v, m[1], example)
			return false
		}
	}
	c.errorf(p, v, "%q is not a valid version: write it quoted like %s", v, example)
	return false
}

func (c *checker) cluster(s *v1alpha1.Spec, p *field.Path) {
	if c.dnsLabel(p.Child("namespace"), s.Namespace) {
		switch s.Namespace {
		case "default", "kube-system", "kube-public", "kube-node-lease":
			c.errorf(p.Child("namespace"), s.Namespace, "%q is a namespace Kubernetes owns: the rendered Namespace would replace its labels (Pod Security level privileged) and its objects would mix with the cluster's own; use a dedicated namespace such as %q", s.Namespace, v1alpha1.DefaultNamespace)
		}
	}
	if c.required(p.Child("kubernetesVersion"), s.KubernetesVersion, "1.34") {
		c.versionFormat(p.Child("kubernetesVersion"), s.KubernetesVersion, kubeMinorRE, kubeNearRE, `"1.34" (the cluster's minor version)`)
	}
	c.oneOf(p.Child("gitops"), s.GitOps, v1alpha1.GitOpsArgoCD, v1alpha1.GitOpsFlux, v1alpha1.GitOpsNone)
	if s.Registry != "" && !registryHost.MatchString(s.Registry) {
		c.errorf(p.Child("registry"), s.Registry, "%q is not a registry host: write host[:port][/path] without scheme or trailing '/', e.g. \"registry.internal:5000/mirror\"", s.Registry)
	}
	seen := map[string]bool{}
	for i, name := range s.ImagePullSecrets {
		ip := p.Child("imagePullSecrets").Index(i)
		if c.dnsSubdomain(ip, name) && seen[name] {
			c.errorf(ip, name, "secret %q is listed twice: remove the duplicate", name)
		}
		seen[name] = true
	}
	c.selector(p.Child("nodeSelector"), s.NodeSelector)
	c.tolerations(p.Child("tolerations"), s.Tolerations)
	if s.Tolerations != nil && len(s.Tolerations) == 0 {
		c.warnf(p.Child("tolerations"), nil, "an empty list drops the default toleration of the nvidia.com/gpu:NoSchedule taint, so GPU nodes tainted that way run none of the stages; remove the field or list the tolerations your GPU nodes need")
	}
	c.dnsSubdomain(p.Child("priorityClassName"), s.PriorityClassName)
	if !v1alpha1.Bool(s.Guardrails.Enabled) {
		c.warnf(p.Child("guardrails", "enabled"), false, "without guardrails the node agent's RBAC lets it change any label of any node; enable them (needs Kubernetes ≥ 1.30) unless an equivalent admission policy exists")
	}
}

// selector checks an entry or pool node selector: valid labels, and none of the gate labels
// the agent sets itself (a DaemonSet gated on them could never start the stage that sets them).
func (c *checker) selector(p *field.Path, sel map[string]string) {
	c.labelMap(p, sel)
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		if gateLabelRE.MatchString(k) {
			c.errorf(p.Key(k), k, "%q is a stage gate the node agent sets itself; selecting on it would keep the stage from ever starting: select on a label a person or NFD sets, e.g. %q", k, config.LabelGPUPresent)
		}
	}
}

func (c *checker) containerRuntime(s *v1alpha1.Spec, p *field.Path) {
	cr := &s.ContainerRuntime
	c.oneOf(p.Child("name"), cr.Name, v1alpha1.DefaultRuntimeName)
	if c.versionFormat(p.Child("version"), cr.Version, minorRE, minorNearRE, `"1.7" or "2.1" (containerd's minor version on the nodes)`) {
		c.containerdMatrix(s, p.Child("version"))
	}
	c.hostPath(p.Child("configPath"), cr.ConfigPath)
	if c.hostPath(p.Child("dropInDir"), cr.DropInDir) && strings.HasPrefix(cr.ConfigPath+"/", cr.DropInDir+"/") {
		c.errorf(p.Child("dropInDir"), cr.DropInDir, "%q contains or equals configPath %q: use a separate directory such as /etc/containerd/conf.d", cr.DropInDir, cr.ConfigPath)
	}
	c.hostPath(p.Child("socket"), cr.Socket)
	if c.oneOf(p.Child("restartMode"), cr.RestartMode, v1alpha1.RestartSystemd, v1alpha1.RestartSignal, v1alpha1.RestartNone) && cr.RestartMode == v1alpha1.RestartNone {
		c.warnf(p.Child("restartMode"), cr.RestartMode, "containerd is never restarted, so the nvidia handler appears only after someone restarts containerd on each node and the toolkit gate stays closed until then; use systemd or signal unless node images are rebuilt")
	}
}

func (c *checker) driver(s *v1alpha1.Spec, p *field.Path) {
	d := &s.Driver
	c.oneOf(p.Child("source"), d.Source, v1alpha1.SourcePreinstalled, v1alpha1.SourceContainer)
	if c.required(p.Child("version"), d.Version, "580.95.05") && c.driverVersion(p.Child("version"), d.Version) {
		c.driverLifecycle(d.Version, p.Child("version"))
	}
	if c.oneOf(p.Child("enforce"), d.Enforce, v1alpha1.EnforceExact, v1alpha1.EnforceBranch, v1alpha1.EnforceNone) && d.Enforce == v1alpha1.EnforceNone {
		c.infof(p.Child("enforce"), d.Enforce, "any driver opens the toolkit gate; drift from driver.version is only labelled, not blocked")
	}
	c.repository(p.Child("image"), d.Image, "driver.version and driver.os")
	if !driverOSRE.MatchString(d.OS) {
		c.errorf(p.Child("os"), d.OS, "%q is not an OS tag of NVIDIA's driver image: use e.g. \"ubuntu24.04\", \"ubuntu22.04\" or \"rhel9.4\"", d.OS)
	}
}

// driverVersion applies the node agent's own rule (config.CheckDriverVersion), so the
// function never renders a version the agent's config loader refuses or compares differently:
// "580.95.5" is refused with the spelling to write, "580.95.05".
func (c *checker) driverVersion(p *field.Path, v string) bool {
	if _, err := config.CheckDriverVersion(v); err != nil {
		c.errorf(p, v, "%v", err)
		return false
	}
	return true
}

func (c *checker) cuda(s *v1alpha1.Spec, p *field.Path) {
	v := s.CUDA.Version
	if c.required(p.Child("version"), v, "12.8") &&
		c.versionFormat(p.Child("version"), v, cudaRE, nil, `"12.8" (major.minor of the workloads' CUDA)`) {
		c.cudaMatrix(s, p.Child("version"))
	}
}

func (c *checker) toolkit(s *v1alpha1.Spec, p *field.Path) {
	t := &s.Toolkit
	c.oneOf(p.Child("source"), t.Source, v1alpha1.SourceContainer, v1alpha1.SourcePreinstalled)
	if c.versionFormat(p.Child("version"), t.Version, semverRE, semverNearRE, `"1.18.0" (without a leading v)`) {
		c.toolkitMatrix(s, p.Child("version"))
	}
	c.repository(p.Child("image"), t.Image, "toolkit.version")
	// The name is both the RuntimeClass and the containerd handler, and a handler must be a label.
	c.dnsLabel(p.Child("runtimeClassName"), t.RuntimeClassName)
	if v1alpha1.Bool(t.SetAsDefault) {
		c.warnf(p.Child("setAsDefault"), true, "every container on the GPU nodes then runs through nvidia-container-runtime, not only pods with runtimeClassName %q; keep false unless legacy pods cannot set runtimeClassName", t.RuntimeClassName)
	}
}

func (c *checker) exporter(e *v1alpha1.Exporter, p *field.Path) {
	switch {
	case e.Port < 1 || e.Port > 65535:
		c.errorf(p.Child("port"), e.Port, "%d is not a TCP port: use 1024–65535, e.g. 9400", e.Port)
	case e.Port < 1024:
		c.errorf(p.Child("port"), e.Port, "port %d is privileged and the exporter runs without NET_BIND_SERVICE: use 1024–65535, e.g. 9400", e.Port)
	}
	c.duration(p.Child("interval"), e.Interval, minExporterGap, 5*time.Second)
	if v1alpha1.Bool(e.PodAttribution) && !v1alpha1.Bool(e.Enabled) {
		c.infof(p.Child("podAttribution"), true, "has no effect while exporter.enabled is false")
	}
}

func (c *checker) images(s *v1alpha1.Spec, p *field.Path) {
	c.pinnedImage(p.Child("images", "gpupolicy"), s.Images.GPUPolicy)
}

// poolObjectPrefix is the longest name prefix a pool name gets in rendered object names.
var poolObjectPrefix = config.DevicePluginConfigMap + "-"

func poolNameLimit() int { return 63 - len(poolObjectPrefix) }

func describePool(i int, name string) string {
	if name == "" {
		return fmt.Sprintf("spec.nodePools[%d]", i)
	}
	return fmt.Sprintf("pool %q (spec.nodePools[%d])", name, i)
}
