package render

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
)

// Prometheus Operator's kinds have no Go types in k8s.io/api; they are built as unstructured
// objects from plain maps (every value a string, int64, bool, map or slice, as the
// unstructured helpers require).
const monitoringAPIVersion = "monitoring.coreos.com/v1"

// gpuBy groups DCGM series, which repeat per pod holding the GPU, to one series per GPU so an
// alert fires once per GPU.
const gpuBy = "max by (Hostname, gpu, UUID, modelName)"

func (c *plan) unstructured(apiVersion, kind, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	m := c.meta(name, true)
	u.SetName(m.Name)
	u.SetNamespace(m.Namespace)
	u.SetLabels(m.Labels)
	return u
}

// serviceMonitor scrapes every exporter pod; honorLabels keeps the exporter's pod, namespace
// and container labels (the workload's) instead of renaming them exported_*.
func (c *plan) serviceMonitor() Object {
	spec := map[string]any{
		"selector":          map[string]any{"matchLabels": map[string]any{LabelName: NameExporter}},
		"namespaceSelector": map[string]any{"matchNames": []any{c.ns}},
		"endpoints": []any{map[string]any{
			"port":        metricsPortName,
			"path":        "/metrics",
			"interval":    c.p.Spec.Exporter.Interval,
			"honorLabels": true,
		}},
	}
	u := c.unstructured(monitoringAPIVersion, "ServiceMonitor", NameExporter, spec)
	addLabels(u, c.p.Spec.Exporter.ServiceMonitorLabels)
	return Object{Stage: StageObservability, Component: "exporter", Obj: u}
}

type alert struct {
	name, expr, forDuration, severity, summary string
}

// prometheusRule holds the alerts on the exporter's metrics (names in
// docs of plugin/exporter): a GPU off the bus, XIDs the device plugin does not ignore, heat,
// uncorrectable memory errors, driver drift from driver.version, a node whose stack is held back,
// a stage whose pods stay unready, and a stale exporter.
func (c *plan) prometheusRule() Object {
	s := &c.p.Spec
	alerts := []alert{
		{"GPULost", "gpupolicy_gpu_up == 0", "1m", "critical",
			"GPU {{ $labels.gpu }} ({{ $labels.UUID }}) on {{ $labels.Hostname }} does not answer NVML (fell off the bus?)"},
		{"GPUXidError", xidExpr(ignoredXIDMatcher(s.DevicePlugin.HealthChecks.IgnoredXIDs)), "0m", "warning",
			"GPU {{ $labels.gpu }} on {{ $labels.Hostname }} reported XID {{ $labels.xid }}"},
		{"GPUTemperatureHigh", gpuBy + " (DCGM_FI_DEV_GPU_TEMP) > 85", "5m", "warning",
			"GPU {{ $labels.gpu }} on {{ $labels.Hostname }} is at {{ $value }} °C"},
		{"GPUDoubleBitECCError", gpuBy + " (increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[10m])) > 0", "0m", "critical",
			"GPU {{ $labels.gpu }} on {{ $labels.Hostname }} had uncorrectable (double-bit) ECC errors"},
		{"GPURowRemapFailure", gpuBy + " (DCGM_FI_DEV_ROW_REMAP_FAILURE) == 1", "0m", "critical",
			"GPU {{ $labels.gpu }} on {{ $labels.Hostname }} failed to remap a memory row: replace it"},
		{"GPUDriverDrift", fmt.Sprintf("gpupolicy_node_driver_info{%s} == 1", driverDriftMatcher(&s.Driver)), "15m", "warning",
			"{{ $labels.Hostname }} runs driver {{ $labels.DCGM_FI_DRIVER_VERSION }}, the policy expects " + driverExpectation(&s.Driver)},
		// A held-back node runs no exporter (its later gates are closed), so its verdict reaches
		// Prometheus as the agent's Node condition, through kube-state-metrics.
		{"GPUStackHeldBack", `kube_node_status_condition{condition="GPUStackReady",status="false"} == 1`, "15m", "warning",
			"{{ $labels.node }}: the GPU stack is held back; kubectl describe node {{ $labels.node }} (condition GPUStackReady) says why"},
		// A stage DaemonSet with a pod that is not ready on a node it should serve, for longer than
		// a driver upgrade slot holds a node (kube-state-metrics' DaemonSet status). The gates
		// keep a held-back node out of the later stages' DaemonSets, so this is a program that
		// does not work, not a node the policy holds back (GPUStackHeldBack).
		{"GPUStageUnavailable", fmt.Sprintf(`kube_daemonset_status_number_unavailable{namespace=%q} > 0`, c.ns), "30m", "warning",
			"DaemonSet {{ $labels.namespace }}/{{ $labels.daemonset }} has had {{ $value }} nodes without a ready pod for 30 minutes; kubectl -n {{ $labels.namespace }} describe daemonset {{ $labels.daemonset }}"},
		{"GPUExporterStale", fmt.Sprintf("time() - gpupolicy_exporter_last_collection_timestamp_seconds > %d", staleAfter(s.Exporter.Interval)), "0m", "warning",
			"the GPU exporter on {{ $labels.Hostname }} has not read NVML for over three intervals"},
	}
	rules := make([]any, 0, len(alerts))
	for _, a := range alerts {
		r := map[string]any{
			"alert":       a.name,
			"expr":        a.expr,
			"labels":      map[string]any{"severity": a.severity},
			"annotations": map[string]any{"summary": a.summary},
		}
		if a.forDuration != "0m" {
			r["for"] = a.forDuration
		}
		rules = append(rules, r)
	}
	spec := map[string]any{"groups": []any{map[string]any{"name": "gpupolicy.gpu", "rules": rules}}}
	u := c.unstructured(monitoringAPIVersion, "PrometheusRule", NameExporter, spec)
	addLabels(u, c.p.Spec.Exporter.PrometheusRuleLabels)
	return Object{Stage: StageObservability, Component: "exporter", Obj: u}
}

// addLabels adds a Prometheus's selector labels (serviceMonitorLabels, prometheusRuleLabels);
// validation keeps them off the labels render sets itself.
func addLabels(u *unstructured.Unstructured, extra map[string]string) {
	if len(extra) == 0 {
		return
	}
	l := u.GetLabels()
	for k, v := range extra {
		l[k] = v
	}
	u.SetLabels(l)
}

// xidExpr fires on an XID counter that rose in the last 10 minutes, and on one that appeared in
// them: the exporter creates a GPU's series for an XID when that XID first happens, at 1 (the
// XIDs a GPU may report are not known ahead, so there is no series at 0 to rise from), and
// increase() of a series' first sample is nothing. sum without () drops the metric name so
// the two branches have the same labels and a series in both is one alert.
func xidExpr(matcher string) string {
	sel := "gpupolicy_gpu_xid_errors_total{" + matcher + "}"
	return fmt.Sprintf("increase(%[1]s[10m]) > 0 or sum without () (%[1]s unless %[1]s offset 10m) > 0", sel)
}

// ignoredXIDMatcher drops the XIDs that applications cause (the device plugin's list).
func ignoredXIDMatcher(xids []uint64) string {
	if len(xids) == 0 {
		return ""
	}
	parts := make([]string, len(xids))
	for i, x := range xids {
		parts[i] = strconv.FormatUint(x, 10)
	}
	return fmt.Sprintf(`xid!~"%s"`, strings.Join(parts, "|"))
}

// driverDriftMatcher selects nodes whose driver differs from driver.version: the same branch
// (major) is enough with enforce=branch; otherwise the exact version is expected.
func driverDriftMatcher(d *v1alpha1.Driver) string {
	if d.Enforce == v1alpha1.EnforceBranch {
		re := regexp.QuoteMeta(driverBranch(d.Version)) + `\..*`
		return fmt.Sprintf(`DCGM_FI_DRIVER_VERSION!~"%s"`, strings.ReplaceAll(re, `\`, `\\`))
	}
	return fmt.Sprintf(`DCGM_FI_DRIVER_VERSION!="%s"`, d.Version)
}

func driverExpectation(d *v1alpha1.Driver) string {
	if d.Enforce == v1alpha1.EnforceBranch {
		return "branch R" + driverBranch(d.Version) + " (" + d.Version + ")"
	}
	return d.Version
}

func driverBranch(version string) string {
	b, _, _ := strings.Cut(version, ".")
	return b
}

// staleAfter is three collection intervals in seconds, at least a minute.
func staleAfter(interval string) int64 {
	d, err := time.ParseDuration(interval)
	if err != nil || d <= 0 {
		d = 15 * time.Second
	}
	return max(int64((3 * d).Seconds()), 60)
}

var _ metav1.Object = (*unstructured.Unstructured)(nil)
