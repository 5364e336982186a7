package diff

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
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
	w("# gpupolicy diff\n\n`%s` → `%s`\n\n**%s**\n\n", r.Base, r.Head, r.Summary)
	if len(r.Findings) == 0 {
		w("No findings.\n")
	}
	for _, f := range r.Findings {
		w("- **%s**: %s\n", f.Severity, f.Message)
	}
	w("\n## Versions\n\n| Version | Base | Head | |\n|---|---|---|---|\n")
	for _, v := range r.Versions {
		mark := ""
		if v.From != v.To && v.From != "" && v.To != "" {
			mark = "**changed**"
		}
		w("| %s | %s | %s | %s |\n", v.Name, code(v.From), code(v.To), mark)
	}
	writeObjects(&b, r.Objects)
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

// maxFieldsShown bounds the fields listed under one object so that a change between two presets
// stays a page; the JSON output lists every one.
const maxFieldsShown = 12

func writeObjects(b *bytes.Buffer, oc ObjectChanges) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("\n## Objects\n\n")
	if len(oc.Added)+len(oc.Removed)+len(oc.Changed) == 0 {
		w("Unchanged.\n")
		return
	}
	for _, it := range oc.Added {
		w("- Added: %s\n", it)
	}
	for _, it := range oc.Removed {
		w("- Removed: %s\n", it)
	}
	if len(oc.Shared) > 0 {
		w("- Changed alike in several objects:\n")
		for _, s := range oc.Shared {
			w("  - %s (%s)\n", fieldLine(s.FieldChange), plural(s.Objects, "object"))
		}
	}
	// Objects that only make the shared changes and move no pods are one line together: between
	// two presets they are most of the tree.
	var alikeOnly []string
	for _, c := range oc.Changed {
		if len(c.Fields) == 0 && c.Effect == "" {
			alikeOnly = append(alikeOnly, c.Object)
		}
	}
	if len(alikeOnly) > 0 {
		w("- Changed only alike (above): %s\n", strings.Join(alikeOnly, ", "))
	}
	for _, c := range oc.Changed {
		if len(c.Fields) == 0 && c.Effect == "" {
			continue
		}
		w("- Changed: %s", c.Object)
		if c.Effect != "" {
			w(" — %s", c.Effect)
		}
		w("\n")
		if len(c.Fields) == 0 {
			w("  - only the changes made alike (above)\n")
		}
		for i, f := range c.Fields {
			if i == maxFieldsShown {
				w("  - … and %d more (`-o json` lists every field)\n", len(c.Fields)-i)
				break
			}
			w("  - %s\n", fieldLine(f))
		}
	}
}

func fieldLine(f FieldChange) string {
	switch {
	case f.From == "":
		return fmt.Sprintf("`%s`: added %s", f.Path, code(f.To))
	case f.To == "":
		return fmt.Sprintf("`%s`: removed (was %s)", f.Path, code(f.From))
	}
	from, to := elideCommon(f.From, f.To)
	return fmt.Sprintf("`%s`: %s → %s", f.Path, code(from), code(to))
}

// elideCommon shortens two long values that differ in a few words (a command line with one
// flag changed) to those words with one word of context each side, so the change is not lost
// behind the truncation of both.
func elideCommon(a, b string) (string, string) {
	if len(a) <= maxValueShown && len(b) <= maxValueShown {
		return a, b
	}
	wa, wb := strings.Split(a, " "), strings.Split(b, " ")
	pre := 0
	for pre < len(wa) && pre < len(wb) && wa[pre] == wb[pre] {
		pre++
	}
	suf := 0
	for suf < len(wa)-pre && suf < len(wb)-pre && wa[len(wa)-1-suf] == wb[len(wb)-1-suf] {
		suf++
	}
	cut := func(w []string) string {
		lo, hi := max(0, pre-1), min(len(w), len(w)-suf+1)
		s := strings.Join(w[lo:hi], " ")
		if lo > 0 {
			s = "… " + s
		}
		if hi < len(w) {
			s += " …"
		}
		return s
	}
	return cut(wa), cut(wb)
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

// sha256Hex is compiled on first use: every gpupolicy-fn process would pay it at start.
var sha256Hex = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{64}$`) })

// maxValueShown bounds one value in Markdown (a long CEL rule or command line); JSON has it whole.
const maxValueShown = 120

func code(s string) string {
	if s == "" {
		return "—"
	}
	if sha256Hex().MatchString(s) {
		s = s[:12] + "…" // a config hash or digest: its start tells two apart
	}
	if r := []rune(s); len(r) > maxValueShown {
		s = string(r[:maxValueShown]) + "…"
	}
	return "`" + strings.ReplaceAll(s, "`", "'") + "`"
}
