package render

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// discoveryPort serves the discovery program's readiness.
const discoveryPort = 8082

// nfdAPIVersion is Node Feature Discovery's API (NodeFeatureRule is cluster-scoped).
const nfdAPIVersion = "nfd.k8s-sigs.io/v1alpha1"

// NVIDIA's PCI vendor id and GPU classes as NFD's pci.device feature spells them (class and
// subclass, no prog-if): VGA-compatible controller and 3D controller.
const nvidiaPCIVendor = "10de"

var gpuPCIClasses = []string{"0300", "0302"}

func (c *plan) discovery() string { return c.p.Spec.GetDiscovery() }

// renderDiscovery sets up whoever sets nvidia.com/gpu.present, the entry label every other
// DaemonSet requires, per spec.discovery: builtin runs gpu-discovery, nfd leaves it to Node
// Feature Discovery through a NodeFeatureRule, none renders nothing (a person labels nodes).
func renderDiscovery(c *plan) (Objects, error) {
	switch c.discovery() {
	case v1alpha1.DiscoveryBuiltin:
		obj, err := c.discoveryDaemonSet()
		return Objects{obj}, err
	case v1alpha1.DiscoveryNFD:
		return Objects{c.nodeFeatureRule()}, nil
	}
	return nil, nil
}

// discoveryDaemonSet runs on every Linux node, because the label it sets is what the entry
// selector waits for. It reads /sys only (all of it: /sys/bus/pci/devices holds relative
// links into /sys/devices) and talks to the API server as an unprivileged, non-root user.
func (c *plan) discoveryDaemonSet() (Object, error) {
	vols, mounts := volumesAndMounts(hostPath("host-sys", "/sys", corev1.HostPathDirectory, hostRoot+"/sys", true))
	return c.build(daemonSet{
		name: NameDiscovery, component: "discovery", stage: StagePrereqs,
		placement: placement{everyLinuxNode: true},
		containers: []corev1.Container{{
			Name:  "discover",
			Image: c.images.gpupolicy,
			Command: []string{"gpu-node-agent", "discover", "--host-root", hostRoot,
				"--listen", ":" + strconv.Itoa(discoveryPort)},
			Env:             []corev1.EnvVar{nodeNameEnv()},
			Resources:       resources("5m", "16Mi", "64Mi"),
			SecurityContext: nonRoot(unprivileged()),
			// Ready while the program works (sysfs read, API server reached), on CPU nodes too.
			ReadinessProbe: httpProbe("/readyz", discoveryPort, 10, 3),
			VolumeMounts:   mounts,
		}},
		volumes: vols,
	})
}

// nodeFeatureRule asks NFD (v0.16+ schema; its pci.device feature, collected by nfd-worker's pci
// source) for the same label the builtin program sets. NFD then owns the label: it removes it
// when the rule stops matching and sets it over a person's value.
func (c *plan) nodeFeatureRule() Object {
	classes := make([]any, len(gpuPCIClasses))
	for i, cl := range gpuPCIClasses {
		classes[i] = cl
	}
	spec := map[string]any{"rules": []any{map[string]any{
		"name":   "nvidia.com/gpu.present",
		"labels": map[string]any{config.LabelGPUPresent: "true"},
		"matchFeatures": []any{map[string]any{
			"feature": "pci.device",
			"matchExpressions": map[string]any{
				"vendor": map[string]any{"op": "In", "value": []any{nvidiaPCIVendor}},
				"class":  map[string]any{"op": "In", "value": classes},
			},
		}},
	}}}
	u := c.unstructured(nfdAPIVersion, "NodeFeatureRule", c.nodeFeatureRuleName(), spec)
	u.SetNamespace("") // cluster-scoped
	return Object{Stage: StagePrereqs, Component: "discovery", Obj: u}
}

// nodeFeatureRuleName carries the namespace, as the cluster roles do, so two policies in one
// cluster do not collide.
func (c *plan) nodeFeatureRuleName() string { return "gpupolicy-" + c.ns + "-gpu-present" }
