package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// Driver upgrade states: the value of LabelDriverUpgradeState, GPU Operator's names (its
// k8s-operator-libs upgrade package), so runbooks and dashboards written for the operator read
// the same label. The agent of each node moves its own node through them in this order;
// drain-required is pod-deletion-required's evictions when drain is enabled.
const (
	UpgradeStateRequired         = "upgrade-required"
	UpgradeStateCordonRequired   = "cordon-required"
	UpgradeStateWaitForJobs      = "wait-for-jobs-required"
	UpgradeStatePodDeletion      = "pod-deletion-required"
	UpgradeStateDrainRequired    = "drain-required"
	UpgradeStatePodRestart       = "pod-restart-required"
	UpgradeStateValidation       = "validation-required"
	UpgradeStateUncordonRequired = "uncordon-required"
	UpgradeStateDone             = "upgrade-done"
	UpgradeStateFailed           = "upgrade-failed"
)

// Driver sources and drift responses (spec.driver.source, spec.driver.onDrift).
const (
	DriverSourcePreinstalled = "preinstalled"
	DriverSourceContainer    = "container"
	OnDriftReport            = "report"
	OnDriftTaint             = "taint"
)

// Driver upgrade keys on a node.
const (
	// LabelDriverUpgradeState is the node's upgrade state (GPU Operator's key).
	LabelDriverUpgradeState = "nvidia.com/gpu-driver-upgrade-state"
	// AnnotationDriverUpgradeMessage says why the node is in its state: what it waits for
	// (the pod, the PodDisruptionBudget), or why it failed.
	AnnotationDriverUpgradeMessage = "nvidia.com/gpu-driver-upgrade.message"
	// AnnotationDriverUpgradeTarget is the driver pod revision (controller-revision-hash) the
	// upgrade in progress moves to. A restarted agent resumes from it and the state label.
	AnnotationDriverUpgradeTarget = "nvidia.com/gpu-driver-upgrade.target"
	// AnnotationDriverUpgradeSince is when the node entered its state (RFC 3339): the
	// wait-for-jobs, drain and validation timeouts count from it, across agent restarts.
	AnnotationDriverUpgradeSince = "nvidia.com/gpu-driver-upgrade.since"
	// AnnotationDriverUpgradeCordoned is "true" when the agent cordoned the node itself, so it
	// uncordons only a node it cordoned (never one a person cordoned before the upgrade).
	AnnotationDriverUpgradeCordoned = "nvidia.com/gpu-driver-upgrade.cordoned"
	// TaintDriverDrift is put on a drifted preinstalled node under onDrift: taint.
	TaintDriverDrift = "nvidia.com/gpu.driver-drift"
)

// Event reasons of the upgrade step.
const (
	ReasonDriverUpgrade       = "DriverUpgrade"
	ReasonDriverUpgradeFailed = "DriverUpgradeFailed"
	ReasonDriverUpgradeDone   = "DriverUpgradeDone"
	ReasonEvictionBlocked     = "DriverUpgradeEvictionBlocked"
)

// UpgradeLeasePrefix begins the name of every upgrade slot Lease: gpu-driver-upgrade-<pool
// or "default">-<n>, n from 0 to maxUnavailable-1.
const UpgradeLeasePrefix = "gpu-driver-upgrade-"

// DefaultUpgradeLeaseDuration is how long a slot held by an agent that stopped renewing it
// stays taken: long enough to ride out an agent restart, short enough that a dead node does
// not stop its pool's upgrade for long.
const DefaultUpgradeLeaseDuration = 60 * time.Second

// AgentUpgrade is spec.driver.upgrade as the agents act on it.
type AgentUpgrade struct {
	// MaxUnavailable: a number of nodes, or a percentage of the pool's GPU nodes ("25%").
	MaxUnavailable string `json:"maxUnavailable"`
	Drain          bool   `json:"drain"`
	// DrainTimeout and WaitForJobsTimeout are Go durations; "0s" waits for ever.
	DrainTimeout     string `json:"drainTimeout"`
	DrainPodSelector string `json:"drainPodSelector,omitempty"`
	// WaitForJobsPodSelector selects the pods to wait for; "" waits for none.
	WaitForJobsPodSelector string `json:"waitForJobsPodSelector,omitempty"`
	WaitForJobsTimeout     string `json:"waitForJobsTimeout"`
}

// Slots is how many nodes of a pool of size nodes may upgrade at once: a number, or a
// percentage rounded up (GPU Operator rounds maxUnavailable up too), at least 1.
func (u *AgentUpgrade) Slots(nodes int) (int, error) {
	s := u.MaxUnavailable
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(pct)
		if err != nil || n < 1 || n > 100 {
			return 0, fmt.Errorf("upgrade.maxUnavailable %q is not a percentage from 1%% to 100%% (spec.driver.upgrade.maxUnavailable)", s)
		}
		return max(1, int(math.Ceil(float64(nodes)*float64(n)/100))), nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("upgrade.maxUnavailable %q is neither a number of nodes (1 or more) nor a percentage (spec.driver.upgrade.maxUnavailable)", s)
	}
	return n, nil
}

// Timeouts parses the drain and wait-for-jobs timeouts (0: for ever).
func (u *AgentUpgrade) Timeouts() (drain, jobs time.Duration, err error) {
	if drain, err = nonNegative("upgrade.drainTimeout", u.DrainTimeout); err != nil {
		return 0, 0, err
	}
	jobs, err = nonNegative("upgrade.waitForJobsTimeout", u.WaitForJobsTimeout)
	return drain, jobs, err
}

func nonNegative(field, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s %q is not a Go duration of 0s or more", field, s)
	}
	return d, nil
}

// Selectors parses the drain and wait-for-jobs pod selectors ("" selects nothing).
func (u *AgentUpgrade) Selectors() (drain, jobs labels.Selector, err error) {
	parse := func(field, s string) (labels.Selector, error) {
		if s == "" {
			return labels.Nothing(), nil
		}
		sel, err := labels.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", field, s, err)
		}
		return sel, nil
	}
	if drain, err = parse("upgrade.drainPodSelector", u.DrainPodSelector); err != nil {
		return nil, nil, err
	}
	jobs, err = parse("upgrade.waitForJobsPodSelector", u.WaitForJobsPodSelector)
	return drain, jobs, err
}

func (u *AgentUpgrade) validate() error {
	if u == nil {
		return nil
	}
	if _, err := u.Slots(1); err != nil {
		return err
	}
	if _, _, err := u.Timeouts(); err != nil {
		return err
	}
	_, _, err := u.Selectors()
	return err
}

// DriverFor is the driver a node with these labels must run and the pool whose driver stage
// runs it ("" for the default stage): the first pool with its own driver whose nodeSelector
// the node matches, else cfg.Driver.
func (cfg *Agent) DriverFor(nodeLabels map[string]string) (AgentDriver, string) {
	for _, p := range cfg.NodePools {
		if MatchesNodeSelector(nodeLabels, p.NodeSelector) {
			if p.Driver != nil {
				return *p.Driver, p.Name
			}
			break
		}
	}
	return cfg.Driver, ""
}

// PoolNamed is the pool called name, or nil.
func (cfg *Agent) PoolNamed(name string) *AgentPool {
	for i := range cfg.NodePools {
		if cfg.NodePools[i].Name == name {
			return &cfg.NodePools[i]
		}
	}
	return nil
}

// DriverDaemonSet is the driver stage DaemonSet of a pool ("" for the default one).
func DriverDaemonSet(pool string) string {
	if pool == "" {
		return DriverDaemonSetName
	}
	return DriverDaemonSetName + "-" + pool
}

// DriverDaemonSetName is the default driver stage's DaemonSet.
const DriverDaemonSetName = "gpu-driver"
