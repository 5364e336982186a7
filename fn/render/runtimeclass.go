package render

import (
	nodev1 "k8s.io/api/node/v1"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// renderRuntimeClass makes the RuntimeClass workloads name to get GPUs. Its scheduling
// nodeSelector is the toolkit-ready label the node agent opens only after containerd has
// loaded the handler, so a pod with this runtime class never lands on a node where the
// handler is missing (it would fail with "no runtime for nvidia is configured").
func renderRuntimeClass(c *plan) (Objects, error) {
	name := c.p.Spec.Toolkit.RuntimeClassName
	return Objects{{Stage: StagePrereqs, Component: "runtimeclass", Obj: &nodev1.RuntimeClass{
		TypeMeta:   typeMeta("node.k8s.io/v1", "RuntimeClass"),
		ObjectMeta: c.meta(name, false),
		Handler:    name,
		Scheduling: &nodev1.Scheduling{
			NodeSelector: map[string]string{config.LabelToolkitReady: config.GateOpen},
			Tolerations:  c.p.Spec.Tolerations,
		},
	}}}, nil
}
