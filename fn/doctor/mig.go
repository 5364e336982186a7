package doctor

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/mig"
)

// CheckMIGConfig is the node finding of a MIG layout that is not in place.
const CheckMIGConfig = "mig-config"

// MIGPoolExpectation is a node pool's MIG layouts: which layout its nodes run unless their
// nvidia.com/mig.config label picks another, and the profiles each layout provides (from
// ConfigMap gpu-mig-config; empty when it could not be read).
type MIGPoolExpectation struct {
	Pool         string              `json:"pool"`
	NodeSelector map[string]string   `json:"nodeSelector"`
	Layout       string              `json:"layout"`
	Layouts      []string            `json:"layouts"`
	Profiles     map[string][]string `json:"profiles,omitempty"`
}

// applyMIGAgent records the pools' MIG settings from the agent config.
func (e *Expectations) applyMIGAgent(agent *config.Agent) {
	e.MIG = nil
	for _, p := range agent.NodePools {
		if p.MIG != nil {
			e.MIG = append(e.MIG, MIGPoolExpectation{Pool: p.Name, NodeSelector: p.NodeSelector, Layout: p.MIG.Layout, Layouts: p.MIG.Layouts})
		}
	}
}

// applyMIGLayouts fills the profiles of each pool's layouts from ConfigMap gpu-mig-config's data.
func (e *Expectations) applyMIGLayouts(data map[string]string) error {
	for i := range e.MIG {
		p := &e.MIG[i]
		raw, ok := data[config.MIGConfigFile(p.Pool)]
		if !ok {
			continue
		}
		var cfg mig.Config
		if err := yaml.Unmarshal([]byte(raw), &cfg); err != nil {
			return fmt.Errorf("key %s of ConfigMap %s: %w", config.MIGConfigFile(p.Pool), config.MIGConfigMap, err)
		}
		p.Profiles = map[string][]string{}
		for name, entries := range cfg.MigConfigs {
			var profiles []string
			for _, dc := range entries {
				for prof, n := range dc.MigDevices {
					if n > 0 && dc.MigEnabled && !slices.Contains(profiles, prof) {
						profiles = append(profiles, prof)
					}
				}
			}
			slices.Sort(profiles)
			p.Profiles[name] = profiles
		}
	}
	return nil
}

// readMIGLayouts reads ConfigMap gpu-mig-config from the cluster when the policy has MIG pools.
func (s *snapshot) readMIGLayouts(ctx context.Context) error {
	if len(s.exp.MIG) == 0 {
		return nil
	}
	ns := s.exp.Namespace
	cm, err := s.in.Cluster.ConfigMap(ctx, ns, config.MIGConfigMap)
	switch {
	case apierrors.IsNotFound(err):
		s.report.Notes = append(s.report.Notes, fmt.Sprintf("no ConfigMap %s/%s: the MIG layouts' profiles are unknown (apply the rendered prerequisites)", ns, config.MIGConfigMap))
		return nil
	case err != nil:
		return s.note(s.readErr("get", "configmaps", ns, config.MIGConfigMap, err), "the MIG layouts' profiles are not checked")
	}
	return s.exp.applyMIGLayouts(cm.Data)
}

// migFinding explains a node whose MIG layout is not in place: the state the MIG step
// reports (pending, rebooting, failed) and its message.
func migFinding(n *corev1.Node) (Finding, bool) {
	state := n.Labels[config.LabelMIGConfigState]
	msg := n.Annotations[config.AnnotationMIGMessage]
	want := n.Labels[config.LabelMIGConfig]
	layout := "its pool's MIG layout"
	if want != "" {
		layout = "MIG layout " + want + " (label " + config.LabelMIGConfig + ")"
	}
	f := Finding{Check: CheckMIGConfig}
	switch state {
	case config.MIGStatePending:
		f.Severity = SeverityWarning
		f.Message = fmt.Sprintf("%s is being applied (%s=pending): %s", layout, config.LabelMIGConfigState, orUnknown(msg))
		f.Fix = "the device-plugin, feature-discovery and exporter gates stay closed until it is applied; if pods hold GPUs (named above), let them finish or move them (kubectl drain " + n.Name + "); the MIG step fails the change with the reason after its timeout (gpu-mig-manager --timeout)"
		if strings.Contains(msg, "waiting for the gate to close") {
			f.Fix = "the gate agent closes the downstream gates first: check gpu-node-agent on " + n.Name + " (kubectl -n gpu-system logs ds/gpu-node-agent)"
		}
	case config.MIGStateRebooting:
		f.Severity = SeverityError
		f.Message = fmt.Sprintf("%s waits for a GPU reset (%s=rebooting): %s", layout, config.LabelMIGConfigState, orUnknown(msg))
		f.Fix = "drain " + n.Name + ", then reset the GPUs (nvidia-smi -r) or reboot the node; the MIG step finishes the layout after it"
	case config.MIGStateFailed:
		f.Severity = SeverityError
		f.Message = fmt.Sprintf("%s failed (%s=failed): %s", layout, config.LabelMIGConfigState, orUnknown(msg))
		f.Fix = "fix what the message names; the MIG step retries at its next pass. To return the node to its pool's layout: kubectl label node " + n.Name + " " + config.LabelMIGConfig + "-"
	default:
		return f, false
	}
	return f, true
}

// migProfileFix says which declared layout provides a MIG profile no node advertises, and how
// to put a node on it; "" when the policy declares no MIG layouts.
func (s *snapshot) migProfileFix(profile string) string {
	if len(s.exp.MIG) == 0 {
		return ""
	}
	var providers, all []string
	for _, p := range s.exp.MIG {
		for _, layout := range slices.Sorted(maps.Keys(p.Profiles)) {
			for _, prof := range p.Profiles[layout] {
				if !slices.Contains(all, prof) {
					all = append(all, prof)
				}
			}
			if slices.Contains(p.Profiles[layout], profile) {
				providers = append(providers, fmt.Sprintf("layout %s of pool %s", layout, p.Pool))
			}
		}
	}
	if len(providers) == 0 {
		slices.Sort(all)
		if len(all) == 0 {
			return fmt.Sprintf("no MIG layout of the policy provides %s: add it to a pool's layouts (spec.nodePools[].mig.layouts) and re-render", profile)
		}
		return fmt.Sprintf("no MIG layout of the policy provides %s (they provide %s): ask for one of those, or add %s to a pool's layouts (spec.nodePools[].mig.layouts) and re-render", profile, strings.Join(all, ", "), profile)
	}
	first := providers[0]
	layout := strings.Fields(first)[1]
	return fmt.Sprintf("%s provides %s, but no node runs it now: move a node of that pool onto it with kubectl label node NODE %s=%s, or make it the pool's layout (spec.nodePools[].mig.layout)", strings.Join(providers, ", "), profile, config.LabelMIGConfig, layout)
}
