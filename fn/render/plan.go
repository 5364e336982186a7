package render

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/internal/yamlout"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// plan holds what several renderers derive from the policy, computed once: resolved images,
// the containerd drop-in and the configuration documents with their hashes.
type plan struct {
	p  *v1alpha1.GPUPolicy
	ns string

	images images

	dropIn       string // the containerd drop-in TOML
	dropInSHA256 string
	agentConfig  []byte // config.Agent as YAML
	// devicePluginConfigs per pool name ("" = the nodes outside every pool).
	devicePluginConfigs map[string][]byte
}

func newPlan(p *v1alpha1.GPUPolicy) (*plan, error) {
	c := &plan{p: p, ns: p.Spec.Namespace}
	if err := checkLabelValues(p); err != nil {
		return nil, err
	}
	var err error
	if c.images, err = resolveImages(&p.Spec); err != nil {
		return nil, err
	}
	if c.dropIn, err = containerdDropIn(p); err != nil {
		return nil, err
	}
	c.dropInSHA256 = sha256Hex([]byte(c.dropIn))
	if c.agentConfig, err = yamlout.Marshal(agentConfig(p, c.dropInSHA256)); err != nil {
		return nil, err
	}
	c.devicePluginConfigs = map[string][]byte{}
	for _, pool := range devicePluginPools(p) {
		b, err := yamlout.Marshal(devicePluginConfig(pool.name, pool.allocation, pool.settings))
		if err != nil {
			return nil, err
		}
		c.devicePluginConfigs[pool.name] = b
	}
	return c, nil
}

// checkLabelValues: names that end up in label values (app.kubernetes.io/instance, the
// device plugin DaemonSet names) must fit the 63 characters of a label value.
func checkLabelValues(p *v1alpha1.GPUPolicy) error {
	var errs field.ErrorList
	if n := p.Metadata.Name; len(n) > validation.LabelValueMaxLength {
		errs = append(errs, field.TooLong(field.NewPath("metadata", "name"), n, validation.LabelValueMaxLength))
	}
	maxPool := validation.LabelValueMaxLength - len(NameDevicePlugin+"-")
	for i, np := range p.Spec.NodePools {
		if len(np.Name) > maxPool {
			errs = append(errs, field.Invalid(field.NewPath("spec", "nodePools").Index(i).Child("name"), np.Name, fmt.Sprintf(
				"must be at most %d characters: the pool's DaemonSet is %s-<name>, and that name is also a label value (at most %d)",
				maxPool, NameDevicePlugin, validation.LabelValueMaxLength)))
		}
	}
	if len(errs) > 0 {
		return v1alpha1.FieldErrors(errs)
	}
	return nil
}

// enabled reports the optional stages.
func (c *plan) featureDiscovery() bool { return v1alpha1.Bool(c.p.Spec.FeatureDiscovery.Enabled) }
func (c *plan) exporter() bool         { return v1alpha1.Bool(c.p.Spec.Exporter.Enabled) }
func (c *plan) guardrails() bool       { return v1alpha1.Bool(c.p.Spec.Guardrails.Enabled) }

// runtimePath is nvidia-container-runtime on the host: where the toolkit image's installer
// copies it, or the distribution package's path.
func runtimePath(t *v1alpha1.Toolkit) string {
	if t.Source == v1alpha1.SourcePreinstalled {
		return "/usr/bin/nvidia-container-runtime"
	}
	return config.ToolkitInstallDir + "/nvidia-container-runtime"
}

func sha256Hex(b ...[]byte) string {
	h := sha256.New()
	for _, x := range b {
		h.Write(x)
	}
	return hex.EncodeToString(h.Sum(nil))
}
