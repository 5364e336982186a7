package render

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// featureDiscoveryInterval is how often GPU feature labels are refreshed; they change only
// with hardware, MIG layout or driver, so a minute is plenty.
const featureDiscoveryInterval = "60s"

// renderFeatureDiscovery labels each GPU node with gpu-feature-discovery's label names from
// NVML (runtime class), as a non-root user; its only privilege is patching its own node's
// nvidia.com/ labels, which the guardrails confine.
func renderFeatureDiscovery(c *plan) (Objects, error) {
	if !c.featureDiscovery() {
		return nil, nil
	}
	vols, mounts := volumesAndMounts(agentConfigMount())
	obj, err := c.build(daemonSet{
		name: NameFeatureDiscovery, component: "feature-discovery", row: config.StageFeatureDiscovery,
		runtimeClass:   true,
		maxUnavailable: maxUnavailableOf(c.p.Spec.FeatureDiscovery.UpdateStrategy),
		configs:        [][]byte{c.agentConfig},
		volumes:        vols,
		containers: []corev1.Container{{
			Name:            "labels",
			Image:           c.images.gpupolicy,
			Command:         []string{"gpu-node-agent", "labels", "--config", config.AgentConfigPath, "--interval", featureDiscoveryInterval},
			Env:             append([]corev1.EnvVar{nodeNameEnv()}, nvmlEnv()...),
			Resources:       resourcesOr(c.p.Spec.FeatureDiscovery.Resources, "10m", "32Mi", "128Mi"),
			SecurityContext: nonRoot(unprivileged()),
			VolumeMounts:    mounts,
		}},
	})
	return Objects{obj}, err
}
