// Package validate checks a defaulted GPUPolicy field by field and against the version matrix
// (fn/validate/matrix), and reports every problem at once, each with a severity, the field path
// and a message that says what is wrong and how to fix it. The same results become KRM function
// results (fn/krm converts them, with the resource and file) or CLI text (Results.Text, for
// `gpupolicy-fn render`). Errors mean the policy cannot work and nothing may be rendered;
// warnings mean it works but is risky. Decoding and defaulting are not here: fn/pipeline runs
// decode → default → validate.
package validate

import (
	"cmp"
	"errors"
	"slices"
	"strings"
)

// Severity of a result; the strings are the KRM function spec's.
type Severity string

const (
	SeverityError   Severity = "error"
	SeverityWarning Severity = "warning"
	SeverityInfo    Severity = "info"
)

// Result is one problem of a policy.
type Result struct {
	Severity Severity
	// Field is the path of the offending field ("spec.nodePools[1].nodeSelector"); empty for
	// problems of the whole document (YAML syntax).
	Field string
	// Value is the offending value where showing it helps; nil otherwise.
	Value any
	// Message says what is wrong and how to fix it.
	Message string
}

// Results of one policy, in the order they were found.
type Results []Result

// HasErrors reports whether any result is an error: then nothing may be rendered.
func (r Results) HasErrors() bool {
	return slices.ContainsFunc(r, func(x Result) bool { return x.Severity == SeverityError })
}

// Err is nil unless r has errors; its text lists every result.
func (r Results) Err() error {
	if !r.HasErrors() {
		return nil
	}
	return errors.New(strings.TrimSuffix(r.Text(""), "\n"))
}

// Sorted returns the results errors first, then warnings, then infos; the order of discovery
// (which follows the document) is kept within a severity. The CLI text and the KRM function's
// results (fn/krm) both list them in this order.
func (r Results) Sorted() Results {
	rank := map[Severity]int{SeverityError: 0, SeverityWarning: 1, SeverityInfo: 2}
	out := slices.Clone(r)
	slices.SortStableFunc(out, func(a, b Result) int { return cmp.Compare(rank[a.Severity], rank[b.Severity]) })
	return out
}

// Text renders the results for a terminal, one line each: "FILE: error: spec.x: message".
func (r Results) Text(file string) string {
	var b strings.Builder
	for _, x := range r.Sorted() {
		if file != "" {
			b.WriteString(file + ": ")
		}
		b.WriteString(string(x.Severity) + ": ")
		if x.Field != "" {
			b.WriteString(x.Field + ": ")
		}
		b.WriteString(x.Message + "\n")
	}
	return b.String()
}
