package render

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

const (
	podResourcesDir    = "/var/lib/kubelet/pod-resources"
	podResourcesSocket = podResourcesDir + "/kubelet.sock"
	metricsPortName    = "metrics"
)

// renderExporter makes the metrics DaemonSet (NVML through the runtime class, unprivileged;
// pod attribution reads the kubelet's pod-resources socket, which needs root but no
// capability), its Service, the ServiceMonitor (serviceMonitor) and the alerts (prometheusRule).
func renderExporter(c *plan) (Objects, error) {
	if !c.exporter() {
		return nil, nil
	}
	e := &c.p.Spec.Exporter
	port := int32(e.GetPort())
	socket := ""
	var ms []mount
	if v1alpha1.Bool(e.PodAttribution) {
		socket = podResourcesSocket
		ms = append(ms, hostPath("pod-resources", podResourcesDir, corev1.HostPathDirectory, podResourcesDir, true))
	}
	vols, mounts := volumesAndMounts(ms...)
	ds, err := c.build(daemonSet{
		name: NameExporter, component: "exporter", row: config.StageExporter,
		runtimeClass:   true,
		maxUnavailable: maxUnavailableOf(e.UpdateStrategy),
		volumes:        vols,
		containers: []corev1.Container{{
			Name:  "exporter",
			Image: c.images.gpupolicy,
			Command: []string{"gpu-exporter",
				"--listen", ":" + strconv.Itoa(e.GetPort()),
				"--interval", e.Interval,
				"--pod-resources-socket=" + socket},
			Env:            append([]corev1.EnvVar{nodeNameEnv()}, nvmlEnv()...),
			Ports:          []corev1.ContainerPort{{Name: metricsPortName, ContainerPort: port, Protocol: corev1.ProtocolTCP}},
			LivenessProbe:  httpProbe("/healthz", port, 30, 3),
			ReadinessProbe: httpProbe("/readyz", port, 10, 3),
			Resources:      resourcesOr(e.Resources, "50m", "64Mi", "128Mi"),
			// uid 0 without capabilities or privilege: the kubelet's pod-resources socket is
			// owned by root (mode 0600 on most distributions), so the image's default user
			// (65532) could not dial it.
			SecurityContext: asRoot(unprivileged()),
			VolumeMounts:    mounts,
		}},
	})
	if err != nil {
		return nil, err
	}
	svc := &corev1.Service{
		TypeMeta:   typeMeta("v1", "Service"),
		ObjectMeta: c.meta(NameExporter, true),
		Spec: corev1.ServiceSpec{
			// Headless: Prometheus scrapes every pod through the endpoints, never a balanced IP.
			ClusterIP: corev1.ClusterIPNone,
			Selector:  map[string]string{LabelName: NameExporter},
			Ports: []corev1.ServicePort{{Name: metricsPortName, Port: port, TargetPort: intstr.FromString(metricsPortName),
				Protocol: corev1.ProtocolTCP}},
		},
	}
	out := Objects{ds, {Stage: StageObservability, Component: "exporter", Obj: svc}}
	if v1alpha1.Bool(e.ServiceMonitor) {
		out = append(out, c.serviceMonitor())
	}
	if v1alpha1.Bool(e.PrometheusRule) {
		out = append(out, c.prometheusRule())
	}
	return out, nil
}
