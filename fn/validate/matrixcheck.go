package validate

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/validate/matrix"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// The version matrix checks. Each is reached only when the versions involved are well formed.

func (c *checker) cudaMatrix(s *v1alpha1.Spec, p *field.Path) {
	c.cudaMatrixAt(s, p, "driver.version")
}

// cudaMatrixAt checks s.Driver (named driverField in the message) against cuda.version; an
// unknown CUDA major is reported at spec.cuda.version only.
func (c *checker) cudaMatrixAt(s *v1alpha1.Spec, p *field.Path, driverField string) {
	cv := matrix.MustParse(s.CUDA.Version)
	facts, ok := c.m.CUDAMajor(cv.Major())
	if !ok {
		if driverField == "driver.version" {
			c.errorf(p, s.CUDA.Version, "CUDA %d.x is not in the version matrix (known: %v): use a supported CUDA version", cv.Major(), c.m.CUDAMajors())
		}
		return
	}
	dv, err := matrix.ParseVersion(s.Driver.Version)
	if _, cerr := config.CheckDriverVersion(s.Driver.Version); err != nil || cerr != nil {
		return // reported at driver.version
	}
	if dv.Less(matrix.MustParse(facts.MinDriver)) {
		value := s.CUDA.Version
		if driverField != "driver.version" {
			value = s.Driver.Version
		}
		c.errorf(p, value, "CUDA %s needs driver ≥ %s but %s is %s: raise %s (e.g. a current R580 release) or lower cuda.version (source: %s)",
			s.CUDA.Version, facts.MinDriver, driverField, s.Driver.Version, driverField, facts.Source)
	}
}

func (c *checker) driverLifecycle(version string, p *field.Path) {
	branch := matrix.MustParse(version).Major()
	b, ok := c.m.Branch(branch)
	if !ok {
		c.infof(p, version, "driver branch R%d is not in the version matrix, so its support lifecycle is not checked", branch)
		return
	}
	if b.PastEOL(c.now) {
		c.warnf(p, version, "driver branch R%d (%s) reached end of life in %s and gets no more security fixes: move to a supported branch%s (source: %s)",
			branch, b.Type, b.EOL, c.supportedBranches(), b.Source)
	}
}

// supportedBranches names the branches still supported at now, for upgrade advice.
func (c *checker) supportedBranches() string {
	var names []string
	for _, b := range c.m.DriverBranches {
		if !b.PastEOL(c.now) {
			names = append(names, fmt.Sprintf("R%d (%s until %s)", b.Branch, b.Type, b.EOL))
		}
	}
	if len(names) == 0 {
		return ""
	}
	return " such as " + joinOr(names)
}

func joinOr(items []string) string {
	if len(items) == 1 {
		return items[0]
	}
	return fmt.Sprintf("%s or %s", joinComma(items[:len(items)-1]), items[len(items)-1])
}

func joinComma(items []string) string {
	out := ""
	for i, it := range items {
		if i > 0 {
			out += ", "
		}
		out += it
	}
	return out
}

func (c *checker) containerdMatrix(s *v1alpha1.Spec, p *field.Path) {
	v := matrix.MustParse(s.ContainerRuntime.Version)
	facts, exact, ok := c.m.ContainerdMinor(v)
	known := c.m.ContainerdMinors()
	switch {
	case !ok && v.Less(matrix.MustParse(known[0])):
		c.errorf(p, s.ContainerRuntime.Version, "containerd %s is not supported (oldest supported: %s, config version 2): upgrade containerd on the nodes", s.ContainerRuntime.Version, known[0])
		return
	case !ok:
		c.errorf(p, s.ContainerRuntime.Version, "containerd %s does not exist: the released minors are %s (2.0 followed 1.7); write the minor that `containerd --version` prints on the nodes", s.ContainerRuntime.Version, joinComma(known))
		return
	}
	if !exact {
		c.warnf(p, s.ContainerRuntime.Version, "containerd %s is newer than the newest minor in the version matrix (%s); its facts are assumed (config version %d): check the rendered drop-in with `containerd config dump` on one node first",
			s.ContainerRuntime.Version, facts.Minor, facts.ConfigVersion)
	}
	if !facts.ImportsMergePluginTables {
		c.infof(p, s.ContainerRuntime.Version, "containerd %s replaces whole plugin tables on import, so the node agent copies the node's own CRI settings into the drop-in at install time; later edits of %s reach containerd only after the toolkit stage re-applies (source: %s)",
			s.ContainerRuntime.Version, s.ContainerRuntime.ConfigPath, facts.Source)
	}
	if !facts.CDI && v1alpha1.Bool(s.Toolkit.CDI) {
		c.errorf(field.NewPath("spec", "toolkit", "cdi"), true, "containerd %s has no CDI support in its CRI plugin (added in 1.7), so the drop-in cannot enable it: set toolkit.cdi: false and deviceListStrategy: envvar, or upgrade containerd to ≥ 1.7 (source: %s)", s.ContainerRuntime.Version, facts.Source)
	}
	if !facts.CDI {
		for _, dp := range devicePlugins(s) {
			if dp.settings.DeviceListStrategy == config.DeviceListCDICRI {
				c.errorf(dp.path.Child("deviceListStrategy"), dp.settings.DeviceListStrategy, "containerd %s has no CDI support in its CRI plugin (added in 1.7): set deviceListStrategy: envvar or upgrade containerd to ≥ 1.7 (source: %s)", s.ContainerRuntime.Version, facts.Source)
				break
			}
		}
	}
	if !facts.CDI {
		for _, a := range allocations(s) {
			if a.value == v1alpha1.AllocationDRA {
				c.errorf(a.path, a.value, "containerd %s has no CDI support in its CRI plugin (added in 1.7), and the kubelet hands DRA devices to containerd only as CDI devices, so pods would start without their GPUs: set allocation: devicePlugin with deviceListStrategy: envvar, or upgrade containerd to ≥ 1.7 (source: %s)", s.ContainerRuntime.Version, facts.Source)
				break
			}
		}
	}
	if facts.ConfigVersion == 3 {
		c.toolkitNeeds(s, matrix.FeatureConfigV3, fmt.Sprintf("containerd %s reads config version 3", s.ContainerRuntime.Version), SeverityError)
	}
}

// toolkitNeeds reports a toolkit older than a feature's first version.
func (c *checker) toolkitNeeds(s *v1alpha1.Spec, feature, why string, sev Severity) {
	f, ok := c.m.Feature(feature)
	tv, err := matrix.ParseVersion(s.Toolkit.Version)
	if !ok || err != nil || !semverRE.MatchString(s.Toolkit.Version) {
		return
	}
	if tv.Less(matrix.MustParse(f.MinVersion)) {
		c.add(sev, field.NewPath("spec", "toolkit", "version"), s.Toolkit.Version, "%s, which needs nvidia-container-toolkit ≥ %s (%s); toolkit.version is %s: raise it to ≥ %s (source: %s)",
			why, f.MinVersion, f.Feature, s.Toolkit.Version, f.MinVersion, f.Source)
	}
}

func (c *checker) toolkitMatrix(s *v1alpha1.Spec, _ *field.Path) {
	if v1alpha1.Bool(s.Toolkit.CDI) {
		c.toolkitNeeds(s, matrix.FeatureCDI, "toolkit.cdi is true", SeverityError)
	}
	c.toolkitNeeds(s, matrix.FeatureContainerdDropIn, "the runtime handler is installed as a containerd drop-in", SeverityWarning)
}

// kubernetes checks the cluster minor against the supported range and the features the
// enabled parts of the output rely on.
func (c *checker) kubernetes(s *v1alpha1.Spec, spec *field.Path) {
	p := spec.Child("kubernetesVersion")
	if !kubeMinorRE.MatchString(s.KubernetesVersion) {
		return // reported by cluster()
	}
	k := matrix.MustParse(s.KubernetesVersion)
	kf := c.m.Kubernetes
	if k.Less(matrix.MustParse(kf.Minimum)) {
		c.errorf(p, s.KubernetesVersion, "Kubernetes %s is older than the oldest the rendered output supports (%s): upgrade the cluster first (source: %s)", s.KubernetesVersion, kf.Minimum, kf.MinimumSource)
		return
	}
	if matrix.MustParse(kf.NewestTested).Less(k) {
		c.warnf(p, s.KubernetesVersion, "Kubernetes %s is newer than the newest tested minor (%s): the output should work but is untested there", s.KubernetesVersion, kf.NewestTested)
	}
	if v1alpha1.Bool(s.Guardrails.Enabled) {
		c.featureGates(s.KubernetesVersion, k, p, kf.Features, "guardrails", "guardrails.enabled: true", "or set guardrails.enabled: false")
	}
	if slices.ContainsFunc(devicePlugins(s), func(d poolSettings) bool { return d.settings.DeviceListStrategy == config.DeviceListCDICRI }) {
		c.featureGates(s.KubernetesVersion, k, p, kf.Features, "cdi-cri", "deviceListStrategy: cdi-cri", "or set deviceListStrategy: envvar")
	}
	c.draMatrix(s, k, p)
}

func (c *checker) featureGates(raw string, k matrix.Version, p *field.Path, features []matrix.KubernetesFeature, usedBy, setting, alternative string) {
	for _, f := range features {
		if f.UsedBy != usedBy {
			continue
		}
		switch {
		case k.Less(matrix.MustParse(f.OnByDefault)):
			c.errorf(p, raw, "%s needs %s, on by default only from Kubernetes %s: upgrade the cluster %s (source: %s)", setting, f.Name, f.OnByDefault, alternative, f.Source)
		case k.Less(matrix.MustParse(f.GA)):
			c.warnf(p, raw, "%s relies on %s, which is beta in Kubernetes %s (GA in %s): make sure its feature gate is not switched off (source: %s)", setting, f.Name, raw, f.GA, f.Source)
		}
	}
}

// poolSettings is one effective device plugin configuration and where it is written.
type poolSettings struct {
	settings *v1alpha1.DevicePlugin
	path     *field.Path
}

// devicePlugins lists spec.devicePlugin and every pool's settings.
func devicePlugins(s *v1alpha1.Spec) []poolSettings {
	out := []poolSettings{{&s.DevicePlugin, field.NewPath("spec", "devicePlugin")}}
	for i := range s.NodePools {
		if dp := s.NodePools[i].DevicePlugin; dp != nil {
			out = append(out, poolSettings{dp, field.NewPath("spec", "nodePools").Index(i).Child("devicePlugin")})
		}
	}
	return out
}
