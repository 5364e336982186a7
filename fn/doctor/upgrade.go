package doctor

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// CheckDriverUpgrade is the node finding of a driver upgrade in progress or failed.
const CheckDriverUpgrade = "driver-upgrade"

// upgradeFinding explains a node in a driver upgrade state other than done: which step, for
// how long, and what holds it (the agent's message names the pod, the PodDisruptionBudget or
// the slot holders).
func upgradeFinding(n *corev1.Node) (Finding, bool) {
	state := n.Labels[config.LabelDriverUpgradeState]
	if state == "" || state == config.UpgradeStateDone {
		return Finding{}, false
	}
	msg := orUnknown(n.Annotations[config.AnnotationDriverUpgradeMessage])
	since := ""
	if t, err := time.Parse(time.RFC3339, n.Annotations[config.AnnotationDriverUpgradeSince]); err == nil {
		since = " since " + t.UTC().Format(time.RFC3339)
	}
	f := Finding{Check: CheckDriverUpgrade, Severity: SeverityWarning,
		Message: fmt.Sprintf("driver upgrade step %s (%s=%s)%s: %s", stepName(state), config.LabelDriverUpgradeState, state, since, msg)}
	logs := "kubectl -n <namespace> logs ds/gpu-node-agent -c driver-upgrade (on " + n.Name + ")"
	switch state {
	case config.UpgradeStateFailed:
		f.Severity = SeverityError
		f.Fix = fmt.Sprintf("the node stays cordoned and keeps its upgrade slot; fix what the message names, then retry: kubectl label node %s %s=%s --overwrite (a newer driver revision retries by itself)",
			n.Name, config.LabelDriverUpgradeState, config.UpgradeStateRequired)
	case config.UpgradeStateRequired:
		f.Fix = "it waits for an upgrade slot (driver.upgrade.maxUnavailable of its pool); the nodes named hold them. A node stuck in another state holds its slot: see its own finding"
	case config.UpgradeStateWaitForJobs:
		f.Fix = "the job pods named above (driver.upgrade.waitForJobs.podSelector) must finish first, or waitForJobs.timeout pass"
	case config.UpgradeStatePodDeletion, config.UpgradeStateDrainRequired:
		if pdb, ok := blockingBudget(msg); ok {
			f.Fix = fmt.Sprintf("PodDisruptionBudget %s allows no disruption now: scale its workload up or wait for it to finish (kubectl get pdb -A | grep %s); the agent retries every pass, until driver.upgrade.drain.timeout", pdb, pdb)
		} else {
			f.Fix = "the pods named above are being evicted; a pod stuck terminating needs its finalizers or its node's kubelet looked at"
		}
	case config.UpgradeStatePodRestart, config.UpgradeStateValidation:
		f.Fix = "the new driver pod must start and load its driver: kubectl -n <namespace> get pods -o wide --field-selector spec.nodeName=" + n.Name + " and the driver pod's log; " + logs
	default:
		f.Fix = logs
	}
	return f, true
}

// blockingBudget finds "PodDisruptionBudget NAME" in the agent's message.
func blockingBudget(msg string) (string, bool) {
	_, rest, ok := strings.Cut(msg, "PodDisruptionBudget ")
	if !ok {
		return "", false
	}
	name, _, _ := strings.Cut(rest, ":")
	return strings.TrimSpace(name), name != ""
}

// stepName says what a state waits for, in words.
func stepName(state string) string {
	switch state {
	case config.UpgradeStateRequired:
		return "waiting for a slot"
	case config.UpgradeStateCordonRequired:
		return "cordon"
	case config.UpgradeStateWaitForJobs:
		return "waiting for jobs"
	case config.UpgradeStatePodDeletion:
		return "evicting GPU pods"
	case config.UpgradeStateDrainRequired:
		return "drain"
	case config.UpgradeStatePodRestart:
		return "driver pod replacement"
	case config.UpgradeStateValidation:
		return "validation"
	case config.UpgradeStateUncordonRequired:
		return "uncordon"
	case config.UpgradeStateFailed:
		return "failed"
	}
	return state
}
