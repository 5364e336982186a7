package render

import (
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// DerivedName is a name or label value the renderer builds from a policy field, with the
// Kubernetes limit it must fit. Validation checks every one before rendering, so a policy whose
// field is valid on its own but too long once prefixed or suffixed is refused with the field to
// shorten instead of rendering an object the API server (or Flux) refuses.
type DerivedName struct {
	Field  *field.Path
	Source string // the field's value
	Value  string // the name derived from it
	Limit  int
	What   string // what the name becomes, for the message
}

// DerivedNames lists every name and label value the renderer derives from p (defaulted).
func DerivedNames(p *v1alpha1.GPUPolicy) []DerivedName {
	label := validation.LabelValueMaxLength
	meta := field.NewPath("metadata", "name")
	out := []DerivedName{{meta, p.Metadata.Name, p.Metadata.Name, label, "the label " + LabelInstance + " of every rendered object"}}
	if p.Spec.GitOps == v1alpha1.GitOpsFlux {
		for _, s := range Stages {
			// kustomize-controller labels every object it applies with
			// kustomize.toolkit.fluxcd.io/name: <Kustomization name>, a label value.
			out = append(out, DerivedName{meta, p.Metadata.Name, fluxName(p, s), label, "the Flux Kustomization of stage " + string(s) + " (also the label kustomize.toolkit.fluxcd.io/name Flux puts on its objects)"})
		}
	}
	for i, np := range p.Spec.NodePools {
		fp := field.NewPath("spec", "nodePools").Index(i).Child("name")
		out = append(out,
			DerivedName{fp, np.Name, NameDevicePlugin + "-" + np.Name, label, "the pool's device plugin DaemonSet (also its label " + LabelName + ")"},
			DerivedName{fp, np.Name, config.DevicePluginConfigMap + "-" + np.Name, label, "the pool's device plugin ConfigMap (also its label " + LabelName + ")"},
		)
	}
	c := &plan{p: p, ns: p.Spec.Namespace}
	for _, sa := range c.nodeWriters() {
		out = append(out, DerivedName{field.NewPath("spec", "namespace"), p.Spec.Namespace, c.clusterRoleName(sa), validation.DNS1123SubdomainMaxLength, "the ClusterRole and ClusterRoleBinding of " + sa})
	}
	return out
}
