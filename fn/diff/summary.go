package diff

import (
	"fmt"
	"strings"

	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// summary is the one line a pull request comment leads with: which versions move, how many
// objects, which DaemonSets restart their pods, and the findings by severity.
func (r *Report) summary() string {
	var parts []string
	if moved := r.Moved(); len(moved) > 0 {
		vs := make([]string, len(moved))
		for i, v := range moved {
			vs[i] = fmt.Sprintf("%s %s → %s", v.Name, v.From, v.To)
		}
		parts = append(parts, "moves "+strings.Join(vs, ", "))
	}
	var counts []string
	for _, c := range []struct {
		n    int
		what string
	}{{len(r.Objects.Changed), "changed"}, {len(r.Objects.Added), "added"}, {len(r.Objects.Removed), "removed"}} {
		if c.n > 0 {
			counts = append(counts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if len(counts) > 0 {
		parts = append(parts, "objects: "+strings.Join(counts, ", "))
	}
	var restarts, onDelete []string
	for _, c := range r.Objects.Changed {
		name := c.Object[strings.LastIndex(c.Object, "/")+1:]
		switch {
		case strings.HasPrefix(c.Effect, "restarts"):
			restarts = append(restarts, name)
		case strings.HasPrefix(c.Effect, "new pod template"):
			onDelete = append(onDelete, name)
		}
	}
	if len(restarts) > 0 {
		parts = append(parts, fmt.Sprintf("restarts the pods of %s (%s) on the nodes %s", plural(len(restarts), "DaemonSet"), strings.Join(restarts, ", "), map[bool]string{true: "it selects", false: "they select"}[len(restarts) == 1]))
	}
	if len(onDelete) > 0 {
		parts = append(parts, fmt.Sprintf("new pod template for %s (%s), applied as its pods are deleted", plural(len(onDelete), "OnDelete DaemonSet"), strings.Join(onDelete, ", ")))
	}
	if len(r.Images) > 0 {
		parts = append(parts, plural(len(r.Images), "container image")+" changed")
	}
	if len(parts) == 0 {
		return "No change: both sides render the same objects."
	}
	var errs, warns int
	for _, f := range r.Findings {
		switch f.Severity {
		case validate.SeverityError:
			errs++
		case validate.SeverityWarning:
			warns++
		}
	}
	switch {
	case errs > 0:
		parts = append(parts, plural(errs, "error")+", "+plural(warns, "warning"))
	case warns > 0:
		parts = append(parts, plural(warns, "warning"))
	default:
		parts = append(parts, "no findings")
	}
	s := strings.Join(parts, "; ")
	return strings.ToUpper(s[:1]) + s[1:] + "."
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
