package render

import (
	"maps"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// daemonSet describes one stage DaemonSet; build turns it into the object with everything
// every DaemonSet shares: gate affinity, tolerations, priority class, pull secrets, the
// component's service account and the config hash that rolls pods when their config changes.
type daemonSet struct {
	name      string
	component string
	// row is the DaemonSet's stage in the stage table (config.Gates): its rollout stage and
	// gate label come from there, and its name must be one the row lists. "" for the
	// DaemonSets before the gates (prereqs), which set stage themselves.
	row       string
	stage     Stage
	placement placement
	// serviceAccount defaults to name (pools share the device plugin's).
	serviceAccount string
	// runtimeClass: the pods need NVML, which the nvidia runtime injects.
	runtimeClass bool
	hostPID      bool
	onDelete     bool // a new pod only when its old one is deleted (the stage table's OnDelete)
	// maxUnavailable of the rolling update: the component's updateStrategy; nil is the default.
	maxUnavailable *intstr.IntOrString
	configs        [][]byte
	initContainers []corev1.Container
	containers     []corev1.Container
	volumes        []corev1.Volume
	gracePeriod    int64
}

func (c *plan) build(d daemonSet) (Object, error) {
	if d.row != "" {
		d.stage, d.placement.gate, d.onDelete = stageRow(d.row, d.name)
	}
	var affinity *corev1.Affinity
	var nodeSelector map[string]string
	if d.placement.everyLinuxNode {
		nodeSelector = map[string]string{corev1.LabelOSStable: "linux"}
	} else {
		var err error
		if affinity, err = c.nodeAffinity(d.placement); err != nil {
			return Object{}, err
		}
	}
	selector := map[string]string{LabelName: d.name}
	podLabels := maps.Clone(c.labels(d.name))
	podLabels[LabelComponent] = d.component
	sa := d.serviceAccount
	if sa == "" {
		sa = d.name
	}
	automount := c.needsToken(sa)
	pod := corev1.PodSpec{
		ServiceAccountName:           sa,
		AutomountServiceAccountToken: &automount,
		PriorityClassName:            c.p.Spec.PriorityClassName,
		NodeSelector:                 nodeSelector,
		Affinity:                     affinity,
		Tolerations:                  c.p.Spec.Tolerations,
		ImagePullSecrets:             c.pullSecrets(),
		HostPID:                      d.hostPID,
		InitContainers:               d.initContainers,
		Containers:                   d.containers,
		Volumes:                      d.volumes,
	}
	if d.gracePeriod > 0 {
		pod.TerminationGracePeriodSeconds = &d.gracePeriod
	}
	if d.runtimeClass {
		rc := c.p.Spec.Toolkit.RuntimeClassName
		pod.RuntimeClassName = &rc
	}
	template := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
		Spec:       pod,
	}
	if len(d.configs) > 0 {
		template.Annotations = map[string]string{AnnotationConfigHash: sha256Hex(d.configs...)}
	}
	maxUnavailable := intstr.FromString(v1alpha1.DefaultMaxUnavailable)
	if d.maxUnavailable != nil {
		maxUnavailable = *d.maxUnavailable
	}
	strategy := appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &maxUnavailable}}
	if d.onDelete {
		strategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	}
	return Object{Stage: d.stage, Component: d.component, Obj: &appsv1.DaemonSet{
		TypeMeta:   typeMeta("apps/v1", "DaemonSet"),
		ObjectMeta: c.meta(d.name, true),
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: selector},
			Template:       template,
			UpdateStrategy: strategy,
		},
	}}, nil
}

func (c *plan) pullSecrets() []corev1.LocalObjectReference {
	var out []corev1.LocalObjectReference
	for _, s := range c.p.Spec.ImagePullSecrets {
		out = append(out, corev1.LocalObjectReference{Name: s})
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// unprivileged is the security context of every container that does not write the host:
// no privilege escalation, no capabilities, read-only root, the runtime's seccomp profile.
func unprivileged() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		Privileged:               ptr(false),
		AllowPrivilegeEscalation: ptr(false),
		ReadOnlyRootFilesystem:   ptr(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// privileged is for the containers that must write the host (driver, toolkit copy and
// install). Privileged does not change the uid: they say uid 0 explicitly, as the image's
// default user is 65532 and root-owned host files (containerd's config, the driver's
// modules) need root.
func privileged() *corev1.SecurityContext {
	return asRoot(&corev1.SecurityContext{Privileged: ptr(true)})
}

// resources: requests keep the scheduler honest on busy GPU nodes, memory limits bound a leak.
// resourcesOr is a component's resources from the policy, or the default given (a policy
// that went through v1alpha1.Default always has them).
func resourcesOr(r *corev1.ResourceRequirements, cpu, memory, memoryLimit string) corev1.ResourceRequirements {
	if r != nil {
		return *r.DeepCopy()
	}
	return resources(cpu, memory, memoryLimit)
}

// maxUnavailableOf is an update strategy's maxUnavailable, nil when unset.
func maxUnavailableOf(u *v1alpha1.UpdateStrategy) *intstr.IntOrString {
	if u == nil {
		return nil
	}
	return u.MaxUnavailable
}

func resources(cpu, memory, memoryLimit string) corev1.ResourceRequirements {
	r := corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(cpu),
		corev1.ResourceMemory: resource.MustParse(memory),
	}}
	if memoryLimit != "" {
		r.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(memoryLimit)}
	}
	return r
}

// nodeNameEnv gives a node program its node (labels, log lines, metric labels).
func nodeNameEnv() corev1.EnvVar {
	return corev1.EnvVar{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "spec.nodeName"}}}
}

// mount is one volume and where a container sees it.
type mount struct {
	volume corev1.Volume
	at     string
	ro     bool
	// propagation for the driver's /run/nvidia, which the host must see.
	propagation *corev1.MountPropagationMode
}

func hostPath(name, path string, typ corev1.HostPathType, at string, readOnly bool) mount {
	return mount{
		volume: corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &typ}}},
		at:     at, ro: readOnly,
	}
}

func configMapMount(name, configMap, at string) mount {
	return mount{
		volume: corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: configMap}}}},
		at: at, ro: true,
	}
}

// emptyDirMount is pod-local scratch space that never reaches the host.
func emptyDirMount(name, at string) mount {
	return mount{volume: corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}, at: at}
}

// volumesAndMounts splits mounts into the pod's volumes and a container's mounts.
func volumesAndMounts(ms ...mount) ([]corev1.Volume, []corev1.VolumeMount) {
	vols := make([]corev1.Volume, 0, len(ms))
	vms := make([]corev1.VolumeMount, 0, len(ms))
	for _, m := range ms {
		vols = append(vols, m.volume)
		vms = append(vms, corev1.VolumeMount{Name: m.volume.Name, MountPath: m.at, ReadOnly: m.ro, MountPropagation: m.propagation})
	}
	return vols, vms
}

// execProbe runs a command; used where the check is the node program's own one-shot mode.
func execProbe(period, failures int32, command ...string) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: command}},
		PeriodSeconds:    period,
		TimeoutSeconds:   10,
		FailureThreshold: failures,
	}
}

func httpProbe(path string, port int32, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(port)}},
		PeriodSeconds:    period,
		TimeoutSeconds:   5,
		FailureThreshold: failures,
	}
}

// stageRow is the rollout stage, gate label and update rule of a stage's DaemonSet, from the
// stage table. A DaemonSet the row does not list (by name, or as "<name>-<pool>") is a
// programming error.
func stageRow(stage, name string) (Stage, string, bool) {
	row, ok := config.GateByName(stage)
	if !ok || row.Rollout == "" {
		panic("render: no stage " + stage + " with DaemonSets in config.Gates")
	}
	for _, ds := range row.DaemonSets {
		if name == ds || row.PerPool && strings.HasPrefix(name, ds+"-") {
			return Stage(row.Rollout), row.Label, row.OnDelete
		}
	}
	panic("render: DaemonSet " + name + " is not one of stage " + stage + "'s " + strings.Join(row.DaemonSets, ", ") + " in config.Gates")
}
