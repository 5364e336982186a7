package diff

import (
	"fmt"
	"strings"
)

// Unified returns a unified diff (3 lines of context) of two texts, or "" when they are equal.
// The containerd drop-in is a few dozen lines, so a plain LCS table is fast enough and keeps
// the output identical to what reviewers know from `diff -u`.
func Unified(a, b, nameA, nameB string) string {
	if a == b {
		return ""
	}
	x, y := splitLines(a), splitLines(b)
	ops := lineOps(x, y)
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", nameA, nameB)
	const context = 3
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		// A hunk runs from context lines before the first change to context lines after the
		// last change that is within 2*context of the next one.
		start := max(0, i-context)
		end := i
		for j := i; j < len(ops); j++ {
			if ops[j].kind != ' ' {
				end = j
			} else if j-end > 2*context {
				break
			}
		}
		end = min(len(ops), end+context+1)
		writeHunk(&out, ops[start:end])
		i = end
	}
	return out.String()
}

type lineOp struct {
	kind       byte // ' ', '-', '+'
	text       string
	aLine, bLn int // 1-based line numbers in a and b before this op
}

func writeHunk(out *strings.Builder, ops []lineOp) {
	var na, nb int
	for _, o := range ops {
		if o.kind != '+' {
			na++
		}
		if o.kind != '-' {
			nb++
		}
	}
	fmt.Fprintf(out, "@@ -%s +%s @@\n", hunkRange(ops[0].aLine, na), hunkRange(ops[0].bLn, nb))
	for _, o := range ops {
		out.WriteByte(o.kind)
		out.WriteString(o.text)
		out.WriteByte('\n')
	}
}

func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start-1)
	}
	if n == 1 {
		return fmt.Sprint(start)
	}
	return fmt.Sprintf("%d,%d", start, n)
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// lineOps is the edit script of x into y by longest common subsequence.
func lineOps(x, y []string) []lineOp {
	n, m := len(x), len(y)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var ops []lineOp
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && x[i] == y[j]:
			ops = append(ops, lineOp{' ', x[i], i + 1, j + 1})
			i, j = i+1, j+1
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, lineOp{'-', x[i], i + 1, j + 1})
			i++
		default:
			ops = append(ops, lineOp{'+', y[j], i + 1, j + 1})
			j++
		}
	}
	return ops
}
