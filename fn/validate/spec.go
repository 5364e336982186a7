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
	"github.com/gpupolicy/gpupolicy/fn/render"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// Version formats of the contract. Near misses ("v1.34", "1.34.2", "2.1.3") get a suggestion.
var (
	kubeMinorRE  = regexp.MustCompile(`^1\.[0-9]{1,3}$`)
	kubeNearRE   = regexp.MustCompile(`^v?(1\.[0-9]{1,3})(\.[0-9]+)?$`)
	minorRE      = regexp.MustCompile(`^[0-9]{1,3}\.[0-9]{1,3}$`)
	minorNearRE  = regexp.MustCompile(`^v?([0-9]{1,3}\.[0-9]{1,3})(\.[0-9]+)?$`)
	cudaRE       = regexp.MustCompile(`^[0-9]{1,3}\.[0-9]{1,3}(\.[0-9]{1,3})?$`)
	semverRE     = regexp.MustCompile(`^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$`)
	semverNearRE = regexp.MustCompile(`^v([0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3})$`)
	driverOSRE   = regexp.MustCompile(`^[a-z]+[0-9]+(\.[0-9]+)*$`)
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
		c.ownedNamespace(p.Child("namespace"), s.Namespace)
	}
	if c.required(p.Child("kubernetesVersion"), s.KubernetesVersion, "1.34") {
		c.versionFormat(p.Child("kubernetesVersion"), s.KubernetesVersion, kubeMinorRE, kubeNearRE, `"1.34" (the cluster's minor version)`)
	}
	c.oneOf(p.Child("gitops"), s.GitOps, v1alpha1.GitOpsArgoCD, v1alpha1.GitOpsFlux, v1alpha1.GitOpsNone)
	c.oneOf(p.Child("discovery"), s.Discovery, v1alpha1.DiscoveryBuiltin, v1alpha1.DiscoveryNFD, v1alpha1.DiscoveryNone)
	if s.Registry != "" && !registryHost.MatchString(s.Registry) {
		c.errorf(p.Child("registry"), s.Registry, "%q is not a registry host: write host[:port][/path] without scheme or trailing '/', e.g. \"registry.internal:5000/mirror\"", s.Registry)
	} else if why := render.ReferenceLimit(s.Registry + "/x"); s.Registry != "" && why != "" {
		c.errorf(p.Child("registry"), s.Registry, "%s: every image would be refused on every node (InvalidImageName); fix the mirror's address", why)
	}
	seen := map[string]bool{}
	for i, name := range s.ImagePullSecrets {
		ip := p.Child("imagePullSecrets").Index(i)
		if c.dnsSubdomain(ip, name) && seen[name] {
			c.errorf(ip, name, "secret %q is listed twice: remove the duplicate", name)
		}
		seen[name] = true
	}
	c.selector(p.Child("nodeSelector"), s.NodeSelector, s, true)
	c.tolerations(p.Child("tolerations"), s.Tolerations)
	if s.Tolerations != nil && len(s.Tolerations) == 0 {
		c.warnf(p.Child("tolerations"), nil, "an empty list drops the default toleration of the nvidia.com/gpu:NoSchedule taint, so GPU nodes tainted that way run none of the stages; remove the field or list the tolerations your GPU nodes need")
	}
	c.dnsSubdomain(p.Child("priorityClassName"), s.PriorityClassName)
	if !v1alpha1.Bool(s.Guardrails.Enabled) {
		c.warnf(p.Child("guardrails", "enabled"), false, "without guardrails the node agent's RBAC lets it change any label of any node; enable them (needs Kubernetes ≥ 1.30) unless an equivalent admission policy exists")
	}
}

// gitopsNamespaces are the namespaces GitOps controllers install themselves in, by owner.
var gitopsNamespaces = map[string]string{
	"flux-system":         "Flux",
	"argocd":              "Argo CD",
	"argo-cd":             "Argo CD",
	"openshift-gitops":    "OpenShift GitOps (Argo CD)",
	"cattle-fleet-system": "Rancher Fleet",
	"fleet-system":        "Rancher Fleet",
}

// ownedNamespace refuses a namespace that belongs to Kubernetes or to a GitOps controller. The
// rendered Namespace object belongs to the GPU stack's first stage, which its GitOps tool
// prunes: removing the GPU stack deletes the Namespace with everything in it.
func (c *checker) ownedNamespace(p *field.Path, ns string) {
	switch {
	case ns == "default" || strings.HasPrefix(ns, "kube-"):
		c.errorf(p, ns, "%q is a namespace Kubernetes owns: the rendered Namespace would replace its labels (Pod Security level privileged), its objects would mix with the cluster's own, and removing the GPU stack would prune the Namespace; use a dedicated namespace such as %q", ns, v1alpha1.DefaultNamespace)
	case gitopsNamespaces[ns] != "":
		c.errorf(p, ns, "%q is the namespace %s runs in: the rendered Namespace would belong to the GPU stack's pruning stage, so removing the GPU stack would delete Namespace %s and %s with it; use a dedicated namespace such as %q", ns, gitopsNamespaces[ns], ns, gitopsNamespaces[ns], v1alpha1.DefaultNamespace)
	}
}

// selector checks an entry or pool node selector: valid labels, and none of the gate labels
// the agent sets itself (a DaemonSet gated on them could never start the stage that sets them).
// The entry selector also takes no other label the stack writes: the node agent's DaemonSet
// requires it, so a label only the agent or a later stage writes would never appear. A pool
// may select on the driver labels (written before the device plugin starts) and, with a
// warning, on feature labels (written alongside it).
func (c *checker) selector(p *field.Path, sel map[string]string, s *v1alpha1.Spec, entry bool) {
	c.labelMap(p, sel)
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		writer := config.SetByStack(k)
		switch {
		case writer == config.WriterGate:
			c.errorf(p.Key(k), k, "%q is a stage gate the node agent sets itself; selecting on it would keep the stage from ever starting: select on a label a person or NFD sets, e.g. %q", k, config.LabelGPUPresent)
		case writer != "" && entry:
			c.errorf(p.Key(k), k, "%q is a label the GPU stack writes itself (%s): the node agent's DaemonSet requires spec.nodeSelector, so on a new node nothing would ever run to set it and no stage would start; select on a label a person, NFD or the cloud sets, e.g. %q, and put finer choices in spec.nodePools", k, writer, config.LabelGPUPresent)
		case writer == config.WriterFeatureDiscovery && !v1alpha1.Bool(s.FeatureDiscovery.Enabled):
			c.errorf(p.Key(k), k, "%q is written only by the feature-discovery stage, which featureDiscovery.enabled: false turns off, so no node would ever join this pool: enable feature discovery or select on a label a person sets, e.g. gpupolicy.dev/pool", k)
		case writer == config.WriterFeatureDiscovery:
			c.warnf(p.Key(k), k, "%q is written by %s, which starts with the device plugin: a new node runs the default device plugin until the label appears and then moves to this pool, so its GPUs are briefly advertised with spec.devicePlugin's settings; label pool nodes yourself (e.g. gpupolicy.dev/pool) to avoid the switch", k, writer)
		}
	}
}

func (c *checker) containerRuntime(s *v1alpha1.Spec, p *field.Path) {
	cr := &s.ContainerRuntime
	c.oneOf(p.Child("name"), cr.Name, v1alpha1.DefaultRuntimeName)
	if c.versionFormat(p.Child("version"), cr.Version, minorRE, minorNearRE, `"1.7" or "2.1" (containerd's minor version on the nodes)`) {
		c.containerdMatrix(s, p.Child("version"))
	}
	c.hostPath(p.Child("configPath"), cr.ConfigPath, v1alpha1.DefaultConfigPath)
	if c.hostPath(p.Child("dropInDir"), cr.DropInDir, v1alpha1.DefaultDropInDir) {
		switch {
		case strings.HasPrefix(cr.ConfigPath+"/", cr.DropInDir+"/"):
			c.errorf(p.Child("dropInDir"), cr.DropInDir, "%q contains or equals configPath %q: use a separate directory such as /etc/containerd/conf.d", cr.DropInDir, cr.ConfigPath)
		case strings.HasPrefix(cr.DropInDir+"/", cr.ConfigPath+"/"):
			c.errorf(p.Child("dropInDir"), cr.DropInDir, "%q is under configPath %q, a file, so the directory cannot exist there: use a separate directory such as /etc/containerd/conf.d", cr.DropInDir, cr.ConfigPath)
		}
	}
	c.hostPath(p.Child("socket"), cr.Socket, v1alpha1.DefaultSocket)
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
	c.kernelModules(p.Child("kernelModuleType"), d.KernelModuleType, d.Version, p.Child("version").String())
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
	if c.dnsLabel(p.Child("runtimeClassName"), t.RuntimeClassName) {
		c.runtimeHandler(p.Child("runtimeClassName"), t.RuntimeClassName)
	}
	c.resources(p.Child("resources"), t.Resources)
	c.updateStrategy(p.Child("updateStrategy"), t.UpdateStrategy)
	if v1alpha1.Bool(t.SetAsDefault) {
		c.warnf(p.Child("setAsDefault"), true, "every container on the GPU nodes then runs through nvidia-container-runtime, not only pods with runtimeClassName %q; keep false unless legacy pods cannot set runtimeClassName", t.RuntimeClassName)
	}
}

// nodeRuntimes are runtime handler names containerd nodes already use for other runtimes:
// runc (containerd's default_runtime_name), crun, youki, gVisor's runsc, Kata's kata and
// kata-<hypervisor>, sysbox, Windows' runhcs and the runwasi WebAssembly shims.
var nodeRuntimes = []string{"runc", "crun", "youki", "runsc", "gvisor", "kata", "sysbox-runc", "runhcs",
	"wasmtime", "wasmedge", "wasmer", "spin", "slight", "lunatic", "crun-wasm"}

// runtimeHandler refuses a handler name the node has for another runtime: the drop-in would
// point that handler at nvidia-container-runtime, so every pod using it (for runc: every pod
// on the GPU nodes) would run through it.
func (c *checker) runtimeHandler(p *field.Path, name string) {
	if !slices.Contains(nodeRuntimes, name) && !strings.HasPrefix(name, "kata-") {
		return
	}
	who := "every pod that uses it"
	if name == "runc" {
		who = "every pod on the GPU nodes (runc is containerd's default runtime)"
	}
	c.errorf(p, name, "%q is a runtime the nodes already have: the drop-in would point containerd's %q handler at nvidia-container-runtime, so %s would run through it; keep the default %q or use another name of your own", name, name, who, v1alpha1.DefaultRuntimeClassName)
}

func (c *checker) exporter(e *v1alpha1.Exporter, p *field.Path) {
	port, lim := e.GetPort(), v1alpha1.Limits["Exporter.Port"]
	switch {
	case port < 1 || port > 65535:
		c.errorf(p.Child("port"), port, "%d is not a TCP port: use %d–%d, e.g. %d", port, lim.Min, lim.Max, v1alpha1.DefaultExporterPort)
	case int64(port) < lim.Min:
		c.errorf(p.Child("port"), port, "port %d is privileged and the exporter runs without NET_BIND_SERVICE: use %d–%d, e.g. %d", port, lim.Min, lim.Max, v1alpha1.DefaultExporterPort)
	}
	if d, ok := c.duration(p.Child("interval"), e.Interval, v1alpha1.MinExporterInterval, 5*time.Second); ok && d > v1alpha1.MaxExporterInterval {
		c.errorf(p.Child("interval"), e.Interval, "%s is longer than the limit of %s: it is also the ServiceMonitor's scrape interval, and Prometheus drops a series not scraped for %s (its lookback), so GPU series would vanish between scrapes and the GPU alerts (GPULost, 10-minute XID and ECC windows) would never fire; use at most %s, e.g. %q",
			e.Interval, v1alpha1.MaxExporterInterval, v1alpha1.PrometheusLookback, v1alpha1.MaxExporterInterval, v1alpha1.DefaultExporterInterval)
	}
	c.selectorLabels(p.Child("serviceMonitorLabels"), e.ServiceMonitorLabels)
	c.selectorLabels(p.Child("prometheusRuleLabels"), e.PrometheusRuleLabels)
	c.resources(p.Child("resources"), e.Resources)
	c.updateStrategy(p.Child("updateStrategy"), e.UpdateStrategy)
}

func (c *checker) images(s *v1alpha1.Spec, p *field.Path) {
	c.pinnedImage(p.Child("images", "gpupolicy"), s.Images.GPUPolicy)
	if s.Registry == "" {
		return
	}
	// Each part may be valid alone and the mirrored whole still too long.
	for _, ref := range []string{s.Images.GPUPolicy, s.Driver.Image, s.Toolkit.Image} {
		repo, _, _ := strings.Cut(render.Mirror(s.Registry, ref), "@")
		if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
			repo = repo[:i]
		}
		if why := render.ReferenceLimit(repo); why != "" {
			c.errorf(p.Child("registry"), s.Registry, "mirrored, the image %s breaks a limit: %s; use a shorter mirror path", repo, why)
			return
		}
	}
}

func describePool(i int, name string) string {
	if name == "" {
		return fmt.Sprintf("spec.nodePools[%d]", i)
	}
	return fmt.Sprintf("pool %q (spec.nodePools[%d])", name, i)
}

// openModulesBranch is the first driver branch with NVIDIA's open GPU kernel modules (R515;
// https://developer.nvidia.com/blog/nvidia-releases-open-source-gpu-kernel-modules/).
const openModulesBranch = 515

// kernelModules checks a kernelModuleType and, for open, that the driver branch has the open
// modules; version is the driver it applies to and where the field that sets it.
func (c *checker) kernelModules(p *field.Path, kind, version, where string) {
	if !c.oneOf(p, kind, v1alpha1.KernelModulesAuto, v1alpha1.KernelModulesOpen, v1alpha1.KernelModulesProprietary) || kind != v1alpha1.KernelModulesOpen {
		return
	}
	if v, err := config.CheckDriverVersion(version); err == nil && v.Branch() < openModulesBranch {
		c.errorf(p, kind, "NVIDIA's open kernel modules start with driver branch R%d, and the driver is %s (%s): use a newer driver, or kernelModuleType proprietary or auto", openModulesBranch, version, where)
	}
}
