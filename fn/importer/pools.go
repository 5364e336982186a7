package importer

import (
	"fmt"
	"regexp"
	"strings"

	sigsyaml "sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
)

// LabelDevicePluginConfig is the node label by which the GPU Operator's device plugin picks
// one entry of its config ConfigMap (k8s-device-plugin's config-manager).
const LabelDevicePluginConfig = "nvidia.com/device-plugin.config"

func init() {
	reasons["DevicePluginConfig"] = map[string]string{
		"flags":                               "this k8s-device-plugin flag has no counterpart in spec.devicePlugin",
		"flags.nvidiaDriverRoot":              "the driver root follows spec.driver.source",
		"flags.gdsEnabled":                    "GPUDirect Storage is not part of v1alpha1",
		"flags.mofedEnabled":                  "GPUDirect RDMA is not part of v1alpha1",
		"resources":                           "renaming GPUs by model (resources.gpus/mig patterns) has no counterpart: one resource name per pool (devicePlugin.resourceName)",
		"sharing.mps.resources":               "MPS per resource other than one replica count for nvidia.com/gpu has no counterpart",
		"sharing.timeSlicing.renameByDefault": "gpupolicy advertises shared GPUs under the pool's resourceName; set it to <name>.shared yourself to keep the renamed resource",
		"sharing.timeSlicing.failRequestsGreaterThanOne": "a pod may request several replicas of a shared GPU; there is no switch to refuse that",
		"sharing.timeSlicing.resources":                  "time-slicing per resource other than one replica count for nvidia.com/gpu has no counterpart",
	}
}

// devicePluginConfig maps the operator's device plugin ConfigMap (devicePlugin.config.name):
// its default entry to spec.devicePlugin, every other entry to a node pool selected by the
// label the operator's config-manager reads.
func (m *mapper) devicePluginConfig(f *fields, in *Input) {
	name := f.str("devicePlugin.config.name")
	def := f.str("devicePlugin.config.default")
	if name == "" {
		return
	}
	var data map[string]string
	for _, cm := range in.ConfigMaps {
		if cm.Name == name {
			data = cm.Data
		}
	}
	if data == nil {
		f.used["devicePlugin.config.name"] = false
		m.r.Notes = append(m.r.Notes, fmt.Sprintf("%s names ConfigMap %s, which is not in the input: pass it too (kubectl get configmap %s -n <operator namespace> -o yaml) to import its time-slicing settings", f.path("devicePlugin.config.name"), name, name))
		return
	}
	for _, key := range sortedKeys(data) {
		from := fmt.Sprintf("ConfigMap %s key %s", name, key)
		var cfg map[string]any
		if err := sigsyaml.Unmarshal([]byte(data[key]), &cfg); err != nil {
			m.fail("%s: not a k8s-device-plugin config: %v", from, err)
			continue
		}
		cf := newFields(from, "DevicePluginConfig", cfg)
		cf.root = ""
		if key == def {
			m.sharingConfig(cf, &m.r.Policy.Spec.DevicePlugin, "spec.devicePlugin")
		} else {
			pool := v1alpha1.NodePool{Name: poolName(key), NodeSelector: map[string]string{LabelDevicePluginConfig: key}, DevicePlugin: &v1alpha1.DevicePlugin{}}
			i := len(m.r.Policy.Spec.NodePools)
			out := fmt.Sprintf("spec.nodePools.%d", i)
			m.set(out, from+fmt.Sprintf(": the operator's device plugin uses it on nodes labelled %s=%s", LabelDevicePluginConfig, key))
			m.sharingConfig(cf, pool.DevicePlugin, out+".devicePlugin")
			m.r.Policy.Spec.NodePools = append(m.r.Policy.Spec.NodePools, pool)
		}
		m.r.Unmapped = append(m.r.Unmapped, cf.unmapped()...)
	}
}

func (m *mapper) sharingConfig(f *fields, dp *v1alpha1.DevicePlugin, out string) {
	f.get("version")
	if s := f.str("flags.migStrategy"); s != "" && m.r.Policy.Spec.DevicePlugin.MIGStrategy == "" {
		dp.MIGStrategy = s
		m.set(out+".migStrategy", f.path("flags.migStrategy"))
	} else if s != "" && s != m.r.Policy.Spec.DevicePlugin.MIGStrategy {
		// The operator passes mig.strategy as MIG_STRATEGY, which wins over the file.
		m.r.Notes = append(m.r.Notes, fmt.Sprintf("%s is %s, but the operator's MIG_STRATEGY (mig.strategy %s) overrides it: the policy keeps %[3]s", f.path("flags.migStrategy"), s, m.r.Policy.Spec.DevicePlugin.MIGStrategy))
	}
	if s := f.str("flags.plugin.deviceListStrategy"); s == "envvar" || s == "cdi-cri" {
		dp.DeviceListStrategy = s
		m.set(out+".deviceListStrategy", f.path("flags.plugin.deviceListStrategy"))
	} else if s != "" {
		f.used["flags.plugin.deviceListStrategy"] = false
	}
	if b := f.boolean("sharing.timeSlicing.renameByDefault"); b != nil && *b {
		f.used["sharing.timeSlicing.renameByDefault"] = false
	}
	if b := f.boolean("sharing.timeSlicing.failRequestsGreaterThanOne"); b != nil && *b {
		f.used["sharing.timeSlicing.failRequestsGreaterThanOne"] = false
	}
	m.mpsConfig(f, dp, out)
	var res []struct {
		Name     string `json:"name"`
		Replicas int    `json:"replicas"`
	}
	if ok, err := f.into("sharing.timeSlicing.resources", &res); err != nil {
		m.errs = append(m.errs, err)
	} else if ok {
		if len(res) == 1 && res[0].Name == "nvidia.com/gpu" {
			replicas := res[0].Replicas
			if dp.Sharing == nil {
				dp.Sharing = &v1alpha1.Sharing{}
			}
			dp.Sharing.TimeSlicing = &v1alpha1.TimeSlicing{Replicas: &replicas}
			m.set(out+".sharing.timeSlicing.replicas", f.path("sharing.timeSlicing.resources"))
		} else {
			f.used["sharing.timeSlicing.resources"] = false
		}
	}
}

var notLabelChar = regexp.MustCompile(`[^a-z0-9-]+`)

// poolName makes a config key a pool name (a DNS-1123 label of at most 45 characters).
func poolName(key string) string {
	n := strings.Trim(notLabelChar.ReplaceAllString(strings.ToLower(key), "-"), "-")
	if len(n) > 45 {
		n = strings.TrimRight(n[:45], "-")
	}
	if n == "" {
		n = "pool"
	}
	return n
}

// nvidiaDrivers maps NVIDIADriver objects: one without a nodeSelector is spec.driver, each
// other one a node pool with its own driver. used says the operator reads them (the
// ClusterPolicy's driver.useNvidiaDriverCRD, or no ClusterPolicy in the input).
func (m *mapper) nvidiaDrivers(in *Input, used bool) {
	if len(in.NVIDIADrivers) == 0 {
		return
	}
	if !used {
		for _, nd := range in.NVIDIADrivers {
			m.r.Notes = append(m.r.Notes, fmt.Sprintf("%s is not carried over: the ClusterPolicy does not set driver.useNvidiaDriverCRD, so the operator ignores it", nd.From))
		}
		return
	}
	s := &m.r.Policy.Spec
	global := ""
	for _, nd := range in.NVIDIADrivers {
		f := newFields("NVIDIADriver "+nd.Typed.Name, "NVIDIADriver", nd.Spec)
		if t := f.str("driverType"); t != "" && t != "gpu" {
			m.fail("%s is %q: gpupolicy manages the gpu driver type only (no vGPU host manager or guest driver)", f.path("driverType"), t)
		}
		var secrets []string
		if ok, err := f.into("imagePullSecrets", &secrets); err != nil {
			m.errs = append(m.errs, err)
		} else if ok {
			m.addSecrets(secrets, f.path("imagePullSecrets"))
		}
		var sel map[string]string
		if _, err := f.into("nodeSelector", &sel); err != nil {
			m.errs = append(m.errs, err)
		}
		if len(sel) == 0 {
			if global != "" {
				m.fail("%s and %s both select every GPU node (no nodeSelector): the operator refuses that too; give one a nodeSelector", global, f.from)
				continue
			}
			global = f.from
			s.Driver.Source = v1alpha1.SourceContainer
			m.set("spec.driver.source", f.from+": NVIDIA's driver container on every GPU node")
			m.driverImage(f, "", &s.Driver.Image, &s.Driver.Version, "spec.driver")
			m.kernelModules(f, "", &s.Driver.KernelModuleType, "spec.driver")
		} else {
			pd := &v1alpha1.NodePoolDriver{Source: v1alpha1.SourceContainer}
			i := len(s.NodePools)
			out := fmt.Sprintf("spec.nodePools.%d", i)
			m.set(out, f.from+" (its nodeSelector)")
			m.driverImage(f, "", &pd.Image, &pd.Version, out+".driver")
			m.kernelModules(f, "", &pd.KernelModuleType, out+".driver")
			s.NodePools = append(s.NodePools, v1alpha1.NodePool{Name: poolName(nd.Typed.Name), NodeSelector: sel, Driver: pd})
		}
		m.r.Unmapped = append(m.r.Unmapped, f.unmapped()...)
	}
	if global == "" && s.Driver.Source == "" {
		// Only pools have a container driver; the other GPU nodes keep what they run.
		s.Driver.Source = v1alpha1.SourcePreinstalled
		m.set("spec.driver.source", "no NVIDIADriver selects every GPU node: the others are validated as preinstalled")
	}
}

// mpsConfig maps k8s-device-plugin's sharing.mps: one resource nvidia.com/gpu with its
// replicas, and renameByDefault, which advertises it as nvidia.com/gpu.shared (k8s-device-plugin
// renames it so; failRequestsGreaterThanOne is always true under MPS, as here).
func (m *mapper) mpsConfig(f *fields, dp *v1alpha1.DevicePlugin, out string) {
	f.get("sharing.mps.failRequestsGreaterThanOne")
	var res []struct {
		Name     string `json:"name"`
		Replicas int    `json:"replicas"`
	}
	ok, err := f.into("sharing.mps.resources", &res)
	if err != nil {
		m.errs = append(m.errs, err)
		return
	}
	if !ok {
		return
	}
	if len(res) != 1 || res[0].Name != "nvidia.com/gpu" {
		f.used["sharing.mps.resources"] = false
		return
	}
	replicas := res[0].Replicas
	if dp.Sharing == nil {
		dp.Sharing = &v1alpha1.Sharing{}
	}
	dp.Sharing.MPS = &v1alpha1.MPS{Replicas: &replicas}
	m.set(out+".sharing.mps.replicas", f.path("sharing.mps.resources"))
	if b := f.boolean("sharing.mps.renameByDefault"); b != nil && *b {
		dp.ResourceName = "nvidia.com/gpu.shared"
		m.set(out+".resourceName", f.path("sharing.mps.renameByDefault"))
	}
}
