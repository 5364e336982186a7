package doctor

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// writeJSON prints the report as indented JSON; field order is the struct's, lists are sorted.
func writeJSON(w io.Writer, r *Report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// writeTable prints a summary table per section, then the findings of each row that has any,
// each with its fix.
func writeTable(w io.Writer, r *Report) error {
	p := &printer{w: w}
	e := r.Expectations
	p.linef("Policy: %s (resource %s, RuntimeClass %s, driver %s enforce %s, entry %s)",
		e.Source, e.ResourceName, e.RuntimeClassName, orUnknown(e.DriverVersion), orUnknown(e.DriverEnforce), selectorString(e.EntrySelector))
	if len(r.Cluster) > 0 {
		p.linef("\nCLUSTER")
		p.findings(r.Cluster)
	}
	if len(r.Nodes) > 0 {
		p.linef("\nNODES")
		p.table([]string{"NODE", "KUBELET", "GATES", "DRIVER", "GPUS found/cap/alloc/used", "RUNTIMECLASS", "VERDICT"}, len(r.Nodes), func(i int) []string {
			n := r.Nodes[i]
			return []string{n.Name, kubeletState(n), gatesSummary(n.Gates), driverSummary(n.Driver), gpuSummary(n.GPUs), rcSummary(n.RuntimeClass), verdictSummary(n.Findings)}
		})
		for _, n := range r.Nodes {
			if len(n.Findings) > 0 {
				p.linef("\n%s", n.Name)
				if c := n.StackCondition; c != nil {
					p.linef("  condition %s=%s (%s)", config.ConditionGPUStackReady, c.Status, c.Reason)
				}
				p.findings(n.Findings)
			}
		}
	}
	if len(r.Pods) > 0 {
		p.linef("\nPODS")
		p.table([]string{"POD", "PHASE", "NODE", "GPUS", "RUNTIMECLASS", "FIRST FAILED GATE"}, len(r.Pods), func(i int) []string {
			pr := r.Pods[i]
			gpus := fmt.Sprint(pr.GPUs)
			if pr.Resource != r.Expectations.ResourceName {
				gpus += " " + pr.Resource
			}
			return []string{pr.Namespace + "/" + pr.Name, orDash(pr.Phase), orDash(pr.Node), gpus, orDash(pr.RuntimeClassName), pr.FailedGate}
		})
		for _, pr := range r.Pods {
			p.linef("\n%s/%s", pr.Namespace, pr.Name)
			label := "why"
			if pr.Finding.Severity == "" {
				label = "ok"
			}
			p.linef("  %s: %s", label, pr.Finding.Message)
			if pr.Finding.Fix != "" {
				p.linef("  fix: %s", pr.Finding.Fix)
			}
			for i, ev := range pr.Evidence {
				if i == 0 {
					p.linef("  events (newest first):")
				}
				p.linef("    %s", ev)
			}
		}
	} else {
		p.linef("\nPODS\n  no pending or failing GPU pods")
	}
	if r.ObjectsRendered > 0 {
		p.linef("\nOBJECTS (%d of %d rendered objects checked, %d missing or changed)", r.ObjectsChecked, r.ObjectsRendered, len(r.Objects))
		for _, o := range r.Objects {
			p.findings([]Finding{o.Finding})
			for _, c := range o.Changes {
				p.linef("           %s", c)
			}
		}
	}
	if len(r.Notes) > 0 {
		p.linef("\nNOT CHECKED")
		for _, n := range r.Notes {
			p.linef("  - %s", n)
		}
	}
	errs := r.Errors()
	switch errs {
	case 0:
		p.linef("\nNo problems found.")
	default:
		p.linef("\n%d problem(s) found.", errs)
	}
	return p.err
}

// printer keeps the first write error so the layout code stays linear.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) linef(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format+"\n", args...)
	}
}

func (p *printer) table(header []string, rows int, row func(int) []string) {
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for i := 0; i < rows; i++ {
		fmt.Fprintln(tw, strings.Join(row(i), "\t"))
	}
	if err := tw.Flush(); err != nil && p.err == nil {
		p.err = err
	}
}

func (p *printer) findings(fs []Finding) {
	for _, f := range fs {
		p.linef("  %-7s  %s: %s", f.Severity, f.Check, f.Message)
		if f.Fix != "" {
			p.linef("           fix: %s", f.Fix)
		}
	}
}

func kubeletState(n NodeReport) string {
	s := "NotReady"
	if n.KubeletReady {
		s = "Ready"
	}
	if n.Unschedulable {
		s += ",cordoned"
	}
	return s
}

// gatesSummary names the first gate that is not open; the findings below say why.
func gatesSummary(gates []Gate) string {
	for _, g := range gates {
		switch g.State {
		case GateStateOptedOut:
			return g.Stage + " opted out"
		case GateStateClosed:
			return "closed at " + g.Stage
		}
	}
	return "all open"
}

func driverSummary(d DriverState) string {
	s := orDash(d.Version)
	if d.KernelModules != "" {
		s += " " + d.KernelModules
	}
	if d.Drift {
		s += " (drift)"
	}
	return s
}

func gpuSummary(g GPUState) string {
	found := "?"
	if g.Found >= 0 {
		found = fmt.Sprint(g.Found)
		if g.Replicas > 1 {
			found += fmt.Sprintf("x%d", g.Replicas)
		}
	}
	s := fmt.Sprintf("%s/%d/%d/%d", found, g.Capacity, g.Allocatable, g.InUse)
	if g.MIGCapacity > 0 {
		s += fmt.Sprintf(" +MIG %d/%d", g.MIGCapacity, g.MIGAllocatable)
	}
	return s
}

func rcSummary(f RuntimeClassFit) string {
	switch {
	case !f.Known:
		return "unknown"
	case f.Matches:
		return "matches"
	}
	return "no match"
}

func verdictSummary(fs []Finding) string {
	if f, ok := firstError(fs); ok {
		return f.Check
	}
	warnings := len(fs)
	if warnings > 0 {
		return fmt.Sprintf("ready (%d warning(s))", warnings)
	}
	return "ready"
}

func orDash(s string) string { return cmp.Or(s, "-") }
