package importer

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
)

// Options are what a person says that the input cannot: the policy's name and GitOps engine,
// and the versions when the input has no Nodes to read them from (a flag wins over a Node).
type Options struct {
	Name              string
	GitOps            string
	KubernetesVersion string
	ContainerdVersion string
	DriverVersion     string
	CUDAVersion       string
	DriverOS          string
}

// Result is an imported policy: the GPUPolicy, where each of its values came from (by field
// path, "spec.driver.version"), and the input fields without an equivalent.
type Result struct {
	Policy   v1alpha1.GPUPolicy
	Sources  map[string]string
	Unmapped []Unmapped
	// Notes are decisions a reviewer should check (a value chosen among several Nodes).
	Notes []string
}

// The GPU Operator's defaults where a ClusterPolicy leaves a field out.
const (
	operatorDriverRepository  = "nvcr.io/nvidia"
	operatorDriverImage       = "driver"
	operatorToolkitRepository = "nvcr.io/nvidia/k8s"
	operatorToolkitImage      = "container-toolkit"
	operatorToolkitInstallDir = "/usr/local/nvidia"
	operatorDriverInstallDir  = "/run/nvidia/driver"
	operatorRuntimeClass      = "nvidia"
)

type mapper struct {
	r    *Result
	errs []error
}

func (m *mapper) set(path, from string) { m.r.Sources[path] = from }

func (m *mapper) fail(format string, args ...any) {
	m.errs = append(m.errs, fmt.Errorf(format, args...))
}

// Import maps in to one GPUPolicy. The error lists every problem at once (a field that cannot
// be carried over faithfully, a required version that neither the Nodes nor opts give).
func Import(in *Input, opts Options) (*Result, error) {
	r, errs := run(in, opts)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return r, nil
}

// run is Import that returns what it mapped along with the errors.
func run(in *Input, opts Options) (*Result, []error) {
	r := &Result{Sources: map[string]string{}}
	m := &mapper{r: r}
	p := &r.Policy
	p.APIVersion, p.Kind = v1alpha1.APIVersion, v1alpha1.Kind
	switch len(in.ClusterPolicies) {
	case 0:
		if len(in.NVIDIADrivers) == 0 {
			return r, []error{errors.New("the input holds no ClusterPolicy and no NVIDIADriver: pass `kubectl get clusterpolicy,nvidiadriver,nodes -o yaml` (Helm values: see import --help)")}
		}
	case 1:
	default:
		var names []string
		for _, cp := range in.ClusterPolicies {
			names = append(names, cp.From)
		}
		return r, []error{fmt.Errorf("the input holds %d ClusterPolicies (%s): the GPU Operator acts on one per cluster; import one cluster at a time", len(names), strings.Join(names, ", "))}
	}
	p.Metadata.Name = opts.Name
	p.Spec.GitOps = opts.GitOps
	driverFromCRD := false
	for _, cp := range in.ClusterPolicies {
		f := newFields(cp.Typed.Kind+" "+cp.Typed.Name, "ClusterPolicy", cp.Spec)
		if p.Metadata.Name == "" {
			p.Metadata.Name = cp.Typed.Name
		}
		driverFromCRD = m.clusterPolicy(f, in)
		r.Unmapped = append(r.Unmapped, f.unmapped()...)
	}
	m.nvidiaDrivers(in, driverFromCRD || len(in.ClusterPolicies) == 0)
	if p.Metadata.Name == "" {
		p.Metadata.Name = "gpu-stack"
	}
	m.versions(in, opts)
	return r, m.errs
}

// clusterPolicy maps one ClusterPolicy; it returns whether the driver comes from NVIDIADriver
// objects (driver.useNvidiaDriverCRD).
func (m *mapper) clusterPolicy(f *fields, in *Input) bool {
	s := &m.r.Policy.Spec
	// operator.defaultRuntime is read and dropped: the operator never uses it (it detects each
	// GPU Node's runtime from containerRuntimeVersion, and the CRD defaults the field to docker
	// on every live ClusterPolicy); versions refuses GPU Nodes that run another runtime.
	_ = f.str("operator.defaultRuntime")
	if rc := f.str("operator.runtimeClass"); rc != "" && rc != v1alpha1.DefaultRuntimeClassName {
		s.Toolkit.RuntimeClassName = rc
		m.set("spec.toolkit.runtimeClassName", f.path("operator.runtimeClass"))
	}

	// Every operand DaemonSet.
	if ok, err := f.into("daemonsets.tolerations", &s.Tolerations); err != nil {
		m.errs = append(m.errs, err)
	} else if ok {
		m.set("spec.tolerations", f.path("daemonsets.tolerations"))
	}
	if pc := f.str("daemonsets.priorityClassName"); pc != "" {
		s.PriorityClassName = pc
		m.set("spec.priorityClassName", f.path("daemonsets.priorityClassName"))
	}
	if us, _ := f.spec["daemonsets"].(map[string]any); us["updateStrategy"] == nil || us["updateStrategy"] == "RollingUpdate" {
		f.get("daemonsets.updateStrategy")
		if mu := f.str("daemonsets.rollingUpdate.maxUnavailable"); mu != "" {
			v := intOrString(mu)
			for path, u := range map[string]**v1alpha1.UpdateStrategy{
				"toolkit": &s.Toolkit.UpdateStrategy, "devicePlugin": &s.DevicePlugin.UpdateStrategy,
				"featureDiscovery": &s.FeatureDiscovery.UpdateStrategy, "exporter": &s.Exporter.UpdateStrategy,
			} {
				*u = &v1alpha1.UpdateStrategy{MaxUnavailable: &v}
				m.set("spec."+path+".updateStrategy.maxUnavailable", f.path("daemonsets.rollingUpdate.maxUnavailable"))
			}
		}
	}

	// Image pull secrets of the components gpupolicy runs, merged into one list.
	for _, c := range []string{"driver", "toolkit", "devicePlugin", "dcgmExporter", "gfd"} {
		var secrets []string
		if ok, err := f.into(c+".imagePullSecrets", &secrets); err != nil {
			m.errs = append(m.errs, err)
		} else if ok {
			m.addSecrets(secrets, f.path(c+".imagePullSecrets"))
		}
	}

	driverFromCRD := false
	if b := f.boolean("driver.useNvidiaDriverCRD"); b != nil && *b {
		driverFromCRD = true
	}
	m.driver(f, driverFromCRD)
	m.toolkit(f)
	m.devicePlugin(f, in)
	m.exporter(f)

	if b := f.boolean("gfd.enabled"); b != nil {
		s.FeatureDiscovery.Enabled = b
		m.set("spec.featureDiscovery.enabled", f.path("gfd.enabled"))
	}
	if ok, err := f.into("gfd.resources", &s.FeatureDiscovery.Resources); err != nil {
		m.errs = append(m.errs, err)
	} else if ok {
		m.set("spec.featureDiscovery.resources", f.path("gfd.resources"))
	}
	if b := f.boolean("cdi.enabled"); b != nil && *b {
		s.Toolkit.CDI = b
		m.set("spec.toolkit.cdi", f.path("cdi.enabled"))
		if d := f.boolean("cdi.default"); d != nil && *d {
			s.DevicePlugin.DeviceListStrategy = "cdi-cri"
			m.set("spec.devicePlugin.deviceListStrategy", f.path("cdi.default")+" (the operator's CDI default mode; gpupolicy's device plugin passes CDI names through the CRI)")
		}
	} else {
		f.get("cdi.default") // CDI off: its default mode says nothing
	}
	for path, def := range map[string]string{"hostPaths.rootFS": "/", "hostPaths.driverInstallDir": operatorDriverInstallDir} {
		if f.str(path) != def {
			f.used[path] = false // another root: reported
		}
	}
	return driverFromCRD
}

func (m *mapper) addSecrets(secrets []string, from string) {
	s := &m.r.Policy.Spec
	for _, sec := range secrets {
		if !slices.Contains(s.ImagePullSecrets, sec) {
			s.ImagePullSecrets = append(s.ImagePullSecrets, sec)
		}
	}
	if len(secrets) > 0 {
		if prev := m.r.Sources["spec.imagePullSecrets"]; prev != "" {
			from = prev + ", " + from
		}
		m.set("spec.imagePullSecrets", from)
	}
}

func (m *mapper) driver(f *fields, fromCRD bool) {
	d := &m.r.Policy.Spec.Driver
	enabled := f.boolean("driver.enabled")
	if fromCRD {
		// The NVIDIADriver objects say which driver each node runs; the ClusterPolicy's image
		// fields are not used by the operator then.
		for _, k := range []string{"repository", "image", "version", "upgradePolicy", "kernelModuleType"} {
			f.get("driver." + k)
		}
		return
	}
	if enabled != nil && !*enabled {
		d.Source = v1alpha1.SourcePreinstalled
		m.set("spec.driver.source", f.path("driver.enabled")+"=false: the driver is on the host image")
		// The upgrade policy applies to the operator's driver container only.
		if _, ok := f.get("driver.upgradePolicy"); ok {
			m.r.Notes = append(m.r.Notes, fmt.Sprintf("%s is not carried over: the operator applies it to its driver container only, and driver.enabled is false", f.path("driver.upgradePolicy")))
		}
		for _, k := range []string{"repository", "image", "version", "kernelModuleType"} {
			f.get("driver." + k)
		}
		return
	}
	d.Source = v1alpha1.SourceContainer
	m.set("spec.driver.source", f.path("driver.enabled")+" (default true): NVIDIA's driver container")
	m.driverImage(f, "driver.", &d.Image, &d.Version, "spec.driver")
	m.kernelModules(f, "driver.", &d.KernelModuleType, "spec.driver")
	m.upgrade(f)
}

// kernelModules maps kernelModuleType (auto, the operator's default, is v1alpha1's too, so
// only open and proprietary are written) of a driver container.
func (m *mapper) kernelModules(f *fields, prefix string, out *string, to string) {
	switch t := f.str(prefix + "kernelModuleType"); t {
	case "", v1alpha1.KernelModulesAuto:
	case v1alpha1.KernelModulesOpen, v1alpha1.KernelModulesProprietary:
		*out = t
		m.set(to+".kernelModuleType", f.path(prefix+"kernelModuleType"))
	default:
		m.fail("%s is %q: the operator takes auto, open or proprietary", f.path(prefix+"kernelModuleType"), t)
	}
}

// driverImage maps repository/image/version of a driver container (ClusterPolicy spec.driver
// or an NVIDIADriver's spec) to image and version.
func (m *mapper) driverImage(f *fields, prefix string, image, version *string, out string) {
	repo, img := f.str(prefix+"repository"), f.str(prefix+"image")
	if repo != "" || img != "" {
		if repo == "" {
			repo = operatorDriverRepository
		}
		if img == "" {
			img = operatorDriverImage
		}
		if ref := repo + "/" + img; ref != v1alpha1.DefaultDriverImage {
			*image = ref
			m.set(out+".image", f.path(prefix+"repository")+" + "+prefix+"image")
		}
	}
	v := f.str(prefix + "version")
	switch {
	case v == "":
	case strings.HasPrefix(v, "sha256:"):
		m.fail("%s is a digest (%s): gpupolicy names the driver by version (the image tag <version>-<os>); pass the version the digest is (--driver-version)", f.path(prefix+"version"), v)
	default:
		*version = v
		m.set(out+".version", f.path(prefix+"version"))
	}
}

func (m *mapper) upgrade(f *fields) {
	u := &v1alpha1.DriverUpgrade{}
	set := false
	const up = "driver.upgradePolicy."
	if mu := f.str(up + "maxUnavailable"); mu != "" {
		v := intOrString(mu)
		u.MaxUnavailable, set = &v, true
		m.set("spec.driver.upgrade.maxUnavailable", f.path(up+"maxUnavailable"))
	}
	if b := f.boolean(up + "autoUpgrade"); b != nil && *b {
		// true is what gpupolicy always does; false is reported.
	} else if b != nil {
		f.used[up+"autoUpgrade"] = false
	}
	if mp := f.str(up + "maxParallelUpgrades"); mp == "0" || mp == "" {
		// 0 is no bound beyond maxUnavailable, as here.
	} else {
		f.used[up+"maxParallelUpgrades"] = false
	}
	drain := &v1alpha1.DriverDrain{}
	if b := f.boolean(up + "drain.enable"); b != nil {
		drain.Enabled = b
		m.set("spec.driver.upgrade.drain.enabled", f.path(up+"drain.enable"))
	}
	// With drain off the operator ignores its timeout and selector, and gpupolicy refuses
	// settings that do nothing: they are reported instead of mapped.
	draining := drain.Enabled == nil || *drain.Enabled
	if t := f.str(up + "drain.timeoutSeconds"); t != "" && draining {
		drain.Timeout = t + "s"
		m.set("spec.driver.upgrade.drain.timeout", f.path(up+"drain.timeoutSeconds"))
	} else if t != "" {
		f.used[up+"drain.timeoutSeconds"] = false
	}
	if ps := f.str(up + "drain.podSelector"); ps != "" && draining {
		drain.PodSelector = ps
		m.set("spec.driver.upgrade.drain.podSelector", f.path(up+"drain.podSelector"))
	} else if ps != "" {
		f.used[up+"drain.podSelector"] = false
	}
	if *drain != (v1alpha1.DriverDrain{}) {
		u.Drain, set = drain, true
	}
	for _, k := range []string{"drain.force", "drain.deleteEmptyDir", "podDeletion.force", "podDeletion.deleteEmptyDir"} {
		if b := f.boolean(up + k); b == nil || *b {
			f.used[up+k] = false // reported when set and true
		}
	}
	f.used[up+"podDeletion.timeoutSeconds"] = false
	wait := &v1alpha1.WaitForJobs{}
	if ps := f.str(up + "waitForCompletion.podSelector"); ps != "" {
		wait.PodSelector = ps
		m.set("spec.driver.upgrade.waitForJobs.podSelector", f.path(up+"waitForCompletion.podSelector"))
	}
	if t := f.str(up + "waitForCompletion.timeoutSeconds"); t != "" && t != "0" && wait.PodSelector == "" {
		f.used[up+"waitForCompletion.timeoutSeconds"] = false
	} else if t != "" && t != "0" {
		wait.Timeout = t + "s"
		m.set("spec.driver.upgrade.waitForJobs.timeout", f.path(up+"waitForCompletion.timeoutSeconds"))
	}
	if *wait != (v1alpha1.WaitForJobs{}) {
		u.WaitForJobs, set = wait, true
	}
	if set {
		m.r.Policy.Spec.Driver.Upgrade = u
	}
}

// Toolkit container variables that become containerRuntime and toolkit fields.
var toolkitEnv = map[string]string{
	"CONTAINERD_CONFIG":         "spec.containerRuntime.configPath",
	"CONTAINERD_SOCKET":         "spec.containerRuntime.socket",
	"CONTAINERD_RUNTIME_CLASS":  "spec.toolkit.runtimeClassName",
	"CONTAINERD_SET_AS_DEFAULT": "spec.toolkit.setAsDefault",
}

func (m *mapper) toolkit(f *fields) {
	s := &m.r.Policy.Spec
	t := &s.Toolkit
	if b := f.boolean("toolkit.enabled"); b != nil && !*b {
		t.Source = v1alpha1.SourcePreinstalled
		m.set("spec.toolkit.source", f.path("toolkit.enabled")+"=false: the toolkit is on the host image")
	}
	repo, img := f.str("toolkit.repository"), f.str("toolkit.image")
	if repo != "" || img != "" {
		if repo == "" {
			repo = operatorToolkitRepository
		}
		if img == "" {
			img = operatorToolkitImage
		}
		if ref := repo + "/" + img; ref != v1alpha1.DefaultToolkitImage {
			t.Image = ref
			m.set("spec.toolkit.image", f.path("toolkit.repository")+" + toolkit.image")
		}
	}
	if v := f.str("toolkit.version"); v != "" {
		// The operator's tags are v<version> or v<version>-<os>; gpupolicy's are v<version>.
		ver := strings.TrimPrefix(v, "v")
		if i := strings.IndexByte(ver, '-'); i > 0 {
			ver = ver[:i]
			m.r.Notes = append(m.r.Notes, fmt.Sprintf("%s is %s: the toolkit image is taken at tag v%s (gpupolicy's tag has no OS suffix)", f.path("toolkit.version"), v, ver))
		}
		if strings.HasPrefix(v, "sha256:") {
			m.fail("%s is a digest (%s): gpupolicy names the toolkit by version; write its version", f.path("toolkit.version"), v)
		} else {
			t.Version = ver
			m.set("spec.toolkit.version", f.path("toolkit.version"))
		}
	}
	if ok, err := f.into("toolkit.resources", &t.Resources); err != nil {
		m.errs = append(m.errs, err)
	} else if ok {
		m.set("spec.toolkit.resources", f.path("toolkit.resources"))
	}
	if dir := f.str("toolkit.installDir"); dir != "" && dir != operatorToolkitInstallDir {
		f.used["toolkit.installDir"] = false
	}
	for _, name := range sortedKeys(toolkitEnv) {
		v, ok := f.get("toolkit.env." + name)
		if !ok {
			continue
		}
		val := fmt.Sprint(v)
		from := f.path("toolkit.env." + name)
		switch name {
		case "CONTAINERD_CONFIG":
			s.ContainerRuntime.ConfigPath = val
		case "CONTAINERD_SOCKET":
			s.ContainerRuntime.Socket = val
		case "CONTAINERD_RUNTIME_CLASS":
			t.RuntimeClassName = val
		case "CONTAINERD_SET_AS_DEFAULT":
			t.SetAsDefault = f.boolean("toolkit.env." + name)
		}
		m.set(toolkitEnv[name], from)
	}
}

// Device plugin variables that become devicePlugin fields.
var devicePluginEnv = []string{"DEVICE_LIST_STRATEGY", "MIG_STRATEGY", "DP_DISABLE_HEALTHCHECKS"}

func (m *mapper) devicePlugin(f *fields, in *Input) {
	dp := &m.r.Policy.Spec.DevicePlugin
	if b := f.boolean("devicePlugin.enabled"); b != nil && *b {
		// On is the only setting gpupolicy has; off is reported.
	} else if b != nil {
		f.used["devicePlugin.enabled"] = false
	}
	if ok, err := f.into("devicePlugin.resources", &dp.Resources); err != nil {
		m.errs = append(m.errs, err)
	} else if ok {
		m.set("spec.devicePlugin.resources", f.path("devicePlugin.resources"))
	}
	if s := f.str("mig.strategy"); s != "" {
		dp.MIGStrategy = s
		m.set("spec.devicePlugin.migStrategy", f.path("mig.strategy"))
	}
	for _, name := range devicePluginEnv {
		v, ok := f.get("devicePlugin.env." + name)
		if !ok {
			continue
		}
		val, from := fmt.Sprint(v), f.path("devicePlugin.env."+name)
		switch name {
		case "DEVICE_LIST_STRATEGY":
			if val != "envvar" && val != "cdi-cri" {
				f.used["devicePlugin.env."+name] = false // volume-mounts, cdi-annotations: reported
				continue
			}
			dp.DeviceListStrategy = val
			m.set("spec.devicePlugin.deviceListStrategy", from)
		case "MIG_STRATEGY":
			if dp.MIGStrategy == "" { // the operator sets it from mig.strategy, which wins
				dp.MIGStrategy = val
				m.set("spec.devicePlugin.migStrategy", from)
			}
		case "DP_DISABLE_HEALTHCHECKS":
			hc, err := healthChecks(val)
			if err != nil {
				m.fail("%s: %v", from, err)
				continue
			}
			dp.HealthChecks = hc
			m.set("spec.devicePlugin.healthChecks", from)
		}
	}
	m.devicePluginConfig(f, in)
}

// healthChecks maps k8s-device-plugin's DP_DISABLE_HEALTHCHECKS: "all" (or "xids") turns
// the XID health check off; a list of XIDs ignores those.
func healthChecks(v string) (*v1alpha1.HealthChecks, error) {
	hc := &v1alpha1.HealthChecks{}
	for _, tok := range strings.Split(v, ",") {
		tok = strings.TrimSpace(tok)
		switch tok {
		case "":
		case "all", "xids":
			off := false
			hc.Enabled = &off
		default:
			x, err := strconv.ParseUint(tok, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%q is neither all, xids nor an XID number", tok)
			}
			hc.IgnoredXIDs = append(hc.IgnoredXIDs, x)
		}
	}
	return hc, nil
}

// Exporter variables that become exporter fields.
var exporterEnv = []string{"DCGM_EXPORTER_LISTEN", "DCGM_EXPORTER_KUBERNETES", "DCGM_EXPORTER_INTERVAL"}

var listenRE = regexp.MustCompile(`^[^:]*:(\d+)$`)

func (m *mapper) exporter(f *fields) {
	e := &m.r.Policy.Spec.Exporter
	if b := f.boolean("dcgmExporter.enabled"); b != nil {
		e.Enabled = b
		m.set("spec.exporter.enabled", f.path("dcgmExporter.enabled"))
	}
	if ok, err := f.into("dcgmExporter.resources", &e.Resources); err != nil {
		m.errs = append(m.errs, err)
	} else if ok {
		m.set("spec.exporter.resources", f.path("dcgmExporter.resources"))
	}
	if b := f.boolean("dcgmExporter.serviceMonitor.enabled"); b != nil {
		e.ServiceMonitor = b
		m.set("spec.exporter.serviceMonitor", f.path("dcgmExporter.serviceMonitor.enabled"))
	}
	if iv := f.str("dcgmExporter.serviceMonitor.interval"); iv != "" {
		e.Interval = iv
		m.set("spec.exporter.interval", f.path("dcgmExporter.serviceMonitor.interval"))
	}
	var labels map[string]string
	if ok, err := f.into("dcgmExporter.serviceMonitor.additionalLabels", &labels); err != nil {
		m.errs = append(m.errs, err)
	} else if ok && len(labels) > 0 {
		e.ServiceMonitorLabels = labels
		m.set("spec.exporter.serviceMonitorLabels", f.path("dcgmExporter.serviceMonitor.additionalLabels"))
	}
	for _, name := range exporterEnv {
		v, ok := f.get("dcgmExporter.env." + name)
		if !ok {
			continue
		}
		val, from := fmt.Sprint(v), f.path("dcgmExporter.env."+name)
		switch name {
		case "DCGM_EXPORTER_LISTEN":
			mm := listenRE.FindStringSubmatch(val)
			if mm == nil {
				m.fail("%s is %q: expected [host]:port", from, val)
				continue
			}
			port, _ := strconv.Atoi(mm[1])
			e.Port = &port
			m.set("spec.exporter.port", from)
		case "DCGM_EXPORTER_KUBERNETES":
			e.PodAttribution = f.boolean("dcgmExporter.env." + name)
			m.set("spec.exporter.podAttribution", from)
		case "DCGM_EXPORTER_INTERVAL": // milliseconds; the ServiceMonitor's interval wins
			ms, err := strconv.Atoi(val)
			if err != nil {
				m.fail("%s is %q: expected milliseconds", from, val)
				continue
			}
			if e.Interval == "" {
				e.Interval = fmt.Sprintf("%gs", float64(ms)/1000)
				m.set("spec.exporter.interval", from)
			}
		}
	}
}

func intOrString(s string) intstr.IntOrString {
	if n, err := strconv.Atoi(s); err == nil {
		return intstr.FromInt32(int32(n))
	}
	return intstr.FromString(s)
}

// gpuNodes are the Nodes the operator treats as GPU nodes: those labelled
// nvidia.com/gpu.present=true.
func gpuNodes(nodes []corev1.Node) []corev1.Node {
	var out []corev1.Node
	for _, n := range nodes {
		if n.Labels["nvidia.com/gpu.present"] == "true" {
			out = append(out, n)
		}
	}
	return out
}
