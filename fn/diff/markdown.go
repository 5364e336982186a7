package diff

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// JSON is the report for tools.
func (r *Report) JSON() []byte {
	b, _ := json.MarshalIndent(r, "", "  ") // strings and slices only
	return append(b, '\n')
}

// Markdown is the report as a pull request comment.
func (r *Report) Markdown() []byte {
	var b bytes.Buffer
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# gpupolicy diff\n\n`%s` → `%s`\n\n", r.Base, r.Head)
	if len(r.Findings) == 0 {
		w("No findings.\n")
	}
	for _, f := range r.Findings {
		w("- **%s**: %s\n", f.Severity, f.Message)
	}
	w("\n## Versions\n\n")
	if len(r.Versions) == 0 {
		w("Unchanged.\n")
	} else {
		writeValues(&b, "Version", r.Versions)
	}
	w("\n## Objects\n\n")
	if len(r.Objects.Added)+len(r.Objects.Removed)+len(r.Objects.Changed) == 0 {
		w("Unchanged.\n")
	}
	for _, x := range []struct {
		label string
		items []string
	}{{"Added", r.Objects.Added}, {"Removed", r.Objects.Removed}, {"Changed", r.Objects.Changed}} {
		for _, it := range x.items {
			w("- %s: %s\n", x.label, it)
		}
	}
	w("\n## Images\n\n")
	if len(r.Images) == 0 {
		w("Unchanged.\n")
	} else {
		writeValues(&b, "Container", r.Images)
	}
	writeSets(&b, "Privileges", r.Privileges)
	writeSets(&b, "Gates and node selectors", r.Gates)
	writeSets(&b, "RBAC", r.RBAC)
	writeSets(&b, "Guardrails", r.Guardrails)
	w("\n## containerd drop-in\n\n")
	if r.DropIn == "" {
		w("Unchanged.\n")
	} else {
		w("```diff\n%s```\n", r.DropIn)
	}
	if r.MIGLayouts != "" {
		w("\n## MIG layouts\n\nThe MIG step repartitions the GPUs of every node of a changed pool (pods holding a GPU keep it until they end).\n\n```diff\n%s```\n", r.MIGLayouts)
	}
	return b.Bytes()
}

func writeValues(b *bytes.Buffer, what string, vs []ValueChange) {
	fmt.Fprintf(b, "| %s | Base | Head |\n|---|---|---|\n", what)
	for _, v := range vs {
		fmt.Fprintf(b, "| %s | %s | %s |\n", v.Name, code(v.From), code(v.To))
	}
}

func writeSets(b *bytes.Buffer, title string, cs []SetChange) {
	fmt.Fprintf(b, "\n## %s\n\n", title)
	if len(cs) == 0 {
		b.WriteString("Unchanged.\n")
		return
	}
	for _, c := range cs {
		fmt.Fprintf(b, "- %s\n", c.Subject)
		for _, a := range c.Added {
			fmt.Fprintf(b, "  - added: %s\n", a)
		}
		for _, r := range c.Removed {
			fmt.Fprintf(b, "  - removed: %s\n", r)
		}
	}
}

func code(s string) string {
	if s == "" {
		return "—"
	}
	return "`" + s + "`"
}
