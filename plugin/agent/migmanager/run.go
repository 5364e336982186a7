package migmanager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/plugin/agent/nodeapi"
	"github.com/gpupolicy/gpupolicy/plugin/agent/wake"
	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/mig"
)

// DefaultTimeout is how long a layout may stay pending (gates still open, GPUs held) before
// the step gives up with state failed and the reason: a wedge must say so, not hang.
const DefaultTimeout = 10 * time.Minute

// DownstreamGates are the gates that must be closed while GPUs are repartitioned, the ones
// the stage table has the MIG step open: the programs behind them (device plugin, feature
// discovery, exporter) hold NVML handles of devices that are about to disappear.
var DownstreamGates = config.LabelsOpenedBy(config.StageMIGManager)

// Manager applies its node's MIG layout.
type Manager struct {
	Client kubernetes.Interface
	Node   string
	Config *config.Agent
	// ConfigDir holds the pools' layout files (ConfigMap gpu-mig-config).
	ConfigDir string
	Lib       nvml.Interface
	// Holders names the pods holding each GPU (the kubelet's pod-resources API); nil: none.
	Holders func(ctx context.Context) (Holders, error)
	// Timeout of a pending layout; 0 is DefaultTimeout.
	Timeout time.Duration
	// HostRoot is where the host's / is mounted: the step records what it applied there
	// (config.MIGAppliedFile) and, for a pool whose device plugin passes CDI names, waits for
	// the toolkit stage's CDI spec to name the new MIG devices. "" skips both (tests, demos).
	HostRoot string
	Logger   *slog.Logger

	now func() time.Time
}

// Outcome is one pass's verdict: the state label value and why.
type Outcome struct {
	State   string // config.MIGState*; "" when the node's pool has no MIG layouts
	Layout  string
	Message string
	Changed []int // GPUs repartitioned in this pass

	since time.Time // when applying Layout began (pending and rebooting)
}

// pendingSince is when applying layout began by the node's annotation, else now.
func pendingSince(node *corev1.Node, layout string, now time.Time) time.Time {
	l, at, ok := strings.Cut(node.Annotations[config.AnnotationMIGPendingSince], " ")
	if t, err := time.Parse(time.RFC3339, at); ok && l == layout && err == nil {
		return t
	}
	return now
}

func (m *Manager) clock() time.Time {
	if m.now != nil {
		return m.now()
	}
	return time.Now()
}

func (m *Manager) log() *slog.Logger {
	l := m.Logger
	if l == nil {
		l = slog.Default()
	}
	return l.With("node", m.Node, "stage", config.StageMIGManager)
}

// Reconcile runs one pass: decide the layout, wait for the downstream gates to close, apply,
// and report the state on the node (labels, annotation, an Event on every change of state).
func (m *Manager) Reconcile(ctx context.Context) (Outcome, error) {
	node, err := m.Client.CoreV1().Nodes().Get(ctx, m.Node, metav1.GetOptions{})
	if err != nil {
		return Outcome{}, err
	}
	out := m.decide(ctx, node)
	if out.State == "" {
		return out, nil
	}
	return out, m.report(ctx, node, out)
}

func (m *Manager) decide(ctx context.Context, node *corev1.Node) Outcome {
	pm, pool := m.Config.MIGFor(node.Labels)
	if pm == nil {
		return Outcome{}
	}
	layoutName, fromLabel, declared := pm.WantedLayout(node.Labels)
	out := Outcome{Layout: layoutName}
	fail := func(format string, args ...any) Outcome {
		out.State, out.Message = config.MIGStateFailed, fmt.Sprintf(format, args...)
		return out
	}
	if !declared {
		return fail("label %s=%s names no layout of pool %s (declared: %s); a node may only pick a layout the policy declares",
			config.LabelMIGConfig, layoutName, pool, strings.Join(pm.Layouts, ", "))
	}
	layout, err := m.loadLayout(pm, layoutName)
	if err != nil {
		return fail("%v", err)
	}
	if pm.GPUProduct != "" {
		if err := checkProduct(m.Lib, layout, pm.GPUProduct); err != nil {
			return fail("layout %s: %v", layoutName, err)
		}
	}
	inPlace, err := InPlace(m.Lib, layout)
	if err != nil {
		return fail("reading the GPUs: %v", err)
	}
	since := pendingSince(node, layoutName, m.clock())
	out.since = since
	timeout := m.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	pending := func(format string, args ...any) Outcome {
		msg := fmt.Sprintf(format, args...)
		if waited := m.clock().Sub(since); waited > timeout {
			return fail("layout %s still not applied after %s: %s", layoutName, waited.Round(time.Second), msg)
		}
		out.State, out.Message = config.MIGStatePending, msg
		return out
	}
	if inPlace {
		if msg, ok := m.cdiReady(node, layoutName); !ok {
			return pending("%s", msg)
		}
		out.State, out.Message = config.MIGStateSuccess, fmt.Sprintf("layout %s is in place", layoutName)
		return out
	}
	if open := openGates(node); len(open) > 0 {
		return pending("waiting for the gate to close %s before repartitioning (the device plugin, feature discovery and exporter hold the GPUs' NVML handles)", strings.Join(open, ", "))
	}
	var held Holders
	if m.Holders != nil {
		if held, err = m.Holders(ctx); err != nil {
			return pending("cannot tell which pods hold GPUs, so none is changed: %v", err)
		}
	}
	changes, err := Apply(m.Lib, layout, held)
	for _, c := range changes {
		if c.Changed {
			out.Changed = append(out.Changed, c.GPU)
		}
	}
	var busy *BusyError
	var reset *ResetError
	switch {
	case errors.As(err, &busy):
		return pending("%v", err)
	case errors.As(err, &reset):
		out.State, out.Message = config.MIGStateRebooting, fmt.Sprintf("layout %s: %v", layoutName, err)
		return out
	case err != nil:
		return fail("layout %s: %v", layoutName, err)
	}
	if msg, ok := m.cdiReady(node, layoutName); !ok {
		return pending("layout %s applied to GPUs %s; %s", layoutName, joinInts(out.Changed), msg)
	}
	why := "the pool's layout"
	if fromLabel {
		why = "chosen by label " + config.LabelMIGConfig
	}
	out.State = config.MIGStateSuccess
	out.Message = fmt.Sprintf("layout %s (%s) applied; GPUs repartitioned: %s", layoutName, why, joinInts(out.Changed))
	return out
}

// cdiReady records the applied MIG devices for the toolkit stage and, when the node's device
// plugin passes CDI device names, says whether the CDI spec names every one yet.
func (m *Manager) cdiReady(node *corev1.Node, layout string) (string, bool) {
	if m.HostRoot == "" {
		return "", true
	}
	uuids, err := migUUIDs(m.Lib)
	if err != nil {
		return fmt.Sprintf("listing the MIG devices: %v", err), false
	}
	if err := recordApplied(m.HostRoot, layout, uuids); err != nil {
		return fmt.Sprintf("recording the MIG devices in %s for the toolkit stage: %v", config.MIGAppliedFile, err), false
	}
	dp := m.Config.PoolFor(node.Labels)
	if !m.Config.Toolkit.CDI || dp.DeviceListStrategy != config.DeviceListCDICRI {
		return "", true
	}
	missing, err := cdiMissing(m.HostRoot, uuids)
	if err != nil {
		return err.Error(), false
	}
	if len(missing) > 0 {
		return fmt.Sprintf("waiting for the toolkit stage to regenerate the CDI spec %s: it does not name MIG devices %s yet", config.CDISpecFile, shortList(missing)), false
	}
	return "", true
}

// openGates are the downstream gates still open on node.
func openGates(node *corev1.Node) []string {
	var open []string
	for _, l := range DownstreamGates {
		if node.Labels[l] == config.GateOpen {
			open = append(open, l)
		}
	}
	return open
}

// loadLayout reads the pool's mig-parted file and returns the named layout.
func (m *Manager) loadLayout(pm *config.AgentMIG, name string) ([]mig.DeviceConfig, error) {
	path := filepath.Join(m.ConfigDir, pm.ConfigFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("MIG layouts: %w (mount ConfigMap %s at %s)", err, config.MIGConfigMap, m.ConfigDir)
	}
	var cfg mig.Config
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		return nil, fmt.Errorf("MIG layouts %s: %w (re-render it with gpupolicy-fn; do not edit by hand)", path, err)
	}
	if cfg.Version != mig.ConfigVersion {
		return nil, fmt.Errorf("MIG layouts %s: version %q, want %q", path, cfg.Version, mig.ConfigVersion)
	}
	layout, ok := cfg.MigConfigs[name]
	if !ok {
		return nil, fmt.Errorf("MIG layouts %s have no layout %q (the agent config and the ConfigMap are from different renders?)", path, name)
	}
	return layout, nil
}

// report writes the state label, message and applied annotation, and posts an Event when the
// state or its message changed.
func (m *Manager) report(ctx context.Context, node *corev1.Node, out Outcome) error {
	annotations := map[string]string{config.AnnotationMIGMessage: out.Message, config.AnnotationMIGPendingSince: ""}
	switch out.State {
	case config.MIGStateSuccess:
		annotations[config.AnnotationMIGApplied] = out.Layout
	default:
		// Kept while failed too: a step restarted after its timeout stays failed, instead of
		// pending for another timeout.
		annotations[config.AnnotationMIGPendingSince] = out.Layout + " " + out.since.UTC().Format(time.RFC3339)
	}
	labels := map[string]string{config.LabelMIGConfigState: out.State}
	changed := node.Labels[config.LabelMIGConfigState] != out.State || node.Annotations[config.AnnotationMIGMessage] != out.Message
	after, err := nodeapi.Converge(ctx, m.Client, m.Node, func(n *corev1.Node) []nodeapi.Change {
		if c := nodeapi.Diff(n, labels, annotations); !c.Empty() {
			return []nodeapi.Change{c}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !changed {
		return nil
	}
	log := m.log()
	typ, reason := corev1.EventTypeNormal, "MIGConfigApplied"
	switch out.State {
	case config.MIGStatePending:
		reason = config.ReasonMIGPending
	case config.MIGStateRebooting:
		typ, reason = corev1.EventTypeWarning, config.ReasonMIGRebooting
	case config.MIGStateFailed:
		typ, reason = corev1.EventTypeWarning, config.ReasonMIGConfigFailed
	}
	log.Info("MIG state changed", "state", out.State, "layout", out.Layout, "message", out.Message)
	if err := nodeapi.Event(ctx, m.Client, after, "gpu-mig-manager", typ, reason, out.Message); err != nil {
		log.Warn("could not post event", "error", err)
	}
	return nil
}

// Run reconciles now, whenever the Node changes (a person's nvidia.com/mig.config, the gate
// closing), and every interval, until ctx ends.
func (m *Manager) Run(ctx context.Context, interval time.Duration) error {
	t := wake.New()
	go t.Node(ctx, m.log(), m.Client, m.Node, interval)
	for {
		if out, err := m.Reconcile(ctx); err != nil {
			m.log().Warn("MIG reconcile failed; retrying", "error", err)
		} else if out.State == "" {
			m.log().Debug("this node's pool declares no MIG layout")
		}
		if err := t.Wait(ctx, interval); err != nil {
			return err
		}
		t.Take()
	}
}
