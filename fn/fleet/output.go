package fleet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gpupolicy/gpupolicy/fn/diff"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// summary says how many clusters change and names them.
func (r *Report) summary() string {
	by := map[string][]string{}
	for _, c := range r.Clusters {
		by[c.Status] = append(by[c.Status], c.Name)
	}
	moving := len(by[Changed]) + len(by[Added]) + len(by[Removed])
	if moving == 0 {
		return fmt.Sprintf("No cluster changes: all %d render the same objects.", len(r.Clusters))
	}
	var parts []string
	for _, s := range []string{Changed, Added, Removed, Unchanged} {
		if names := by[s]; len(names) > 0 {
			parts = append(parts, fmt.Sprintf("%s: %s", s, strings.Join(names, ", ")))
		}
	}
	return fmt.Sprintf("%d of %d clusters move: %s.", moving, len(r.Clusters), strings.Join(parts, "; "))
}

// Fails reports whether a cluster has a finding at threshold or above ("warning" or "error";
// "" never fails).
func (r *Report) Fails(threshold string) bool {
	for _, c := range r.Clusters {
		if diff.FindingsFail(c.Findings, threshold) {
			return true
		}
	}
	return false
}

// JSON is the report for CI, indented, with a final newline.
func (r *Report) JSON() []byte {
	b, _ := json.MarshalIndent(r, "", "  ") // plain structs of strings: cannot fail
	return append(b, '\n')
}

// Markdown is the blast radius a reviewer pastes into the pull request: the summary, one
// table row per cluster, then each moving cluster's diff summary and findings.
func (r *Report) Markdown() []byte {
	var b bytes.Buffer
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# gpupolicy fleet diff\n\n`%s` → `%s`\n\n**%s**\n", r.Old, r.New, r.Summary)
	moving := false
	for _, c := range r.Clusters {
		moving = moving || c.Status != Unchanged
	}
	if !moving {
		return b.Bytes()
	}
	w("\n| cluster | change | node pools | DaemonSets restarted | containerd restart | driver reload | MIG repartition | findings |\n|---|---|---|---|---|---|---|---|\n")
	for _, c := range r.Clusters {
		restart := ""
		if c.ContainerdRestart {
			restart = "every GPU node"
		}
		w("| %s | %s | %s | %s | %s | %s | %s | %s |\n", c.Name, c.Status, list(c.Pools), list(c.DaemonSets), restart,
			list(c.DriverReload), list(c.MIGRepartition), counts(c))
	}
	for _, c := range r.Clusters {
		if c.Status != Changed {
			continue
		}
		w("\n## %s\n\n%s\n", c.Name, c.Summary)
		if len(c.Findings) > 0 {
			w("\n")
		}
		for _, f := range c.Findings {
			w("- **%s**: %s\n", f.Severity, f.Message)
		}
	}
	return b.Bytes()
}

func list(items []string) string { return strings.Join(items, ", ") }

func counts(c Cluster) string {
	var e, w int
	for _, f := range c.Findings {
		switch f.Severity {
		case validate.SeverityError:
			e++
		case validate.SeverityWarning:
			w++
		}
	}
	var parts []string
	if e > 0 {
		parts = append(parts, fmt.Sprintf("%d error(s)", e))
	}
	if w > 0 {
		parts = append(parts, fmt.Sprintf("%d warning(s)", w))
	}
	return strings.Join(parts, ", ")
}
