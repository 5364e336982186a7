package render

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// Stage is where an object belongs in the rollout: Argo CD applies stages as sync waves, Flux
// as Kustomizations that depend on the previous one. Waves order objects cluster-wide; the
// node agent's label gates order the stages on each node.
type Stage string

// The rollout stages, named by the stage table (config.Gates), which also says which stage
// each gated DaemonSet belongs to.
const (
	// StagePrereqs: namespace, service accounts, RBAC, ConfigMaps, RuntimeClass, guardrails and
	// the node agent, which opens the driver gate.
	StagePrereqs      Stage = config.RolloutPrereqs
	StageDriver       Stage = config.RolloutDriver
	StageToolkit      Stage = config.RolloutToolkit
	StageDevicePlugin Stage = config.RolloutDevicePlugin
	// StageObservability: feature labels and the exporter with its monitoring objects.
	StageObservability Stage = config.RolloutObservability
)

// Stages in rollout order: the stage table's (config.RolloutStages).
var Stages = rolloutStages()

func rolloutStages() []Stage {
	var out []Stage
	for _, s := range config.RolloutStages() {
		out = append(out, Stage(s))
	}
	return out
}

// Index is the stage's position in Stages.
func (s Stage) Index() int { return slices.Index(Stages, s) }

// Wave is the Argo CD sync wave: prerequisites -1, driver 0, toolkit 1, device plugin 2,
// labels and exporter 3.
func (s Stage) Wave() int { return s.Index() - 1 }

// Dir is the stage's directory in the rendered tree; the number keeps `ls` in rollout order.
func (s Stage) Dir() string { return fmt.Sprintf("%02d-%s", s.Index(), s) }

// Ordering metadata.
const (
	AnnotationSyncWave = "argocd.argoproj.io/sync-wave"
	// AnnotationStage names an object's stage in the Flux layout, where the stage directory is
	// lost once objects are applied.
	AnnotationStage = "gpupolicy.dev/stage"
)

// kindOrder applies dependencies first within a stage (a DaemonSet after its ServiceAccount
// and ConfigMap), the way kubectl and Argo CD order kinds.
var kindOrder = []string{
	"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
	"ConfigMap", "RuntimeClass", "DeviceClass", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
	"Service", "DaemonSet", "ServiceMonitor", "PrometheusRule",
}

func kindRank(kind string) int {
	if i := slices.Index(kindOrder, kind); i >= 0 {
		return i
	}
	return len(kindOrder)
}

// sortObjects orders by stage, kind and name, so the output order never depends on the order
// renderers ran or a map was iterated.
func sortObjects(objs Objects) {
	slices.SortStableFunc(objs, func(a, b Object) int {
		ka, kb := a.Obj.GetObjectKind().GroupVersionKind().Kind, b.Obj.GetObjectKind().GroupVersionKind().Kind
		return cmp.Or(
			cmp.Compare(a.Stage.Index(), b.Stage.Index()),
			cmp.Compare(kindRank(ka), kindRank(kb)),
			cmp.Compare(ka, kb),
			cmp.Compare(a.Obj.GetNamespace(), b.Obj.GetNamespace()),
			cmp.Compare(a.Obj.GetName(), b.Obj.GetName()),
		)
	})
}

// applyOrdering sets the ordering metadata of spec.gitops on every object.
func applyOrdering(gitops string, objs Objects) error {
	var key string
	var value func(Stage) string
	switch gitops {
	case v1alpha1.GitOpsArgoCD:
		key, value = AnnotationSyncWave, func(s Stage) string { return strconv.Itoa(s.Wave()) }
	case v1alpha1.GitOpsFlux:
		key, value = AnnotationStage, func(s Stage) string { return string(s) }
	case v1alpha1.GitOpsNone:
		return nil
	default:
		return v1alpha1.FieldErrors{field.NotSupported(field.NewPath("spec", "gitops"), gitops,
			[]string{v1alpha1.GitOpsArgoCD, v1alpha1.GitOpsFlux, v1alpha1.GitOpsNone})}
	}
	for _, o := range objs {
		a := o.Obj.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		a[key] = value(o.Stage)
		o.Obj.SetAnnotations(a)
	}
	return nil
}
