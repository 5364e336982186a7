package yamlout

import (
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v3"
)

// The emitter below is a Writer's direct path: it writes JSON-compatible data as block
// YAML, byte for byte what go.yaml.in/yaml/v3 writes with indent 2 and compact sequences, at
// a fraction of the cost: yaml.v3 turns every value into events, analyses every scalar and
// grows its buffers event by event, which was most of the time of a render. It covers the
// shapes rendered objects have; anything else (floats, nested sequences, scalars whose
// presentation it cannot decide cheaply and exactly) makes it report false and the Writer
// falls back to yaml.v3 for that value, so the output never depends on which path ran. The
// equivalence is tested against yaml.v3 on the golden outputs and on crafted edge cases
// (writer_test.go).

// scalarStyle says which yaml.v3 entry point the output must match: encoding a Go map
// (Encoder.Encode of map[string]any: strings that YAML 1.1 reads as booleans or base-60
// numbers are quoted, keys sorted "naturally") or a node tree of !!str scalars (Node:
// keys sorted bytewise, only YAML 1.2 look-alikes quoted).
type scalarStyle uint8

const (
	styleMap scalarStyle = iota
	styleNode
)

// emitter holds the output and the presentations of the scalars it had to ask yaml.v3 about,
// shared by the documents of one call.
type emitter struct {
	style  scalarStyle
	buf    []byte
	quoted map[string]string
	keys   []string
}

// document appends m as a top-level block mapping.
func (e *emitter) document(m map[string]any) bool {
	if len(m) == 0 {
		return false // "{}" at the root: left to yaml.v3
	}
	return e.mapping(m, 0, false)
}

// seqItem appends m as an item of a compact block sequence at column 0 ("- key: ...").
func (e *emitter) seqItem(m map[string]any) bool {
	if len(m) == 0 {
		return false
	}
	e.buf = append(e.buf, '-', ' ')
	return e.mapping(m, 2, true)
}

// mapping writes m at indent; inline means the first key continues the current line (after
// "- " of a sequence item).
func (e *emitter) mapping(m map[string]any, indent int, inline bool) bool {
	start := len(e.keys)
	for k := range m {
		e.keys = append(e.keys, k)
	}
	keys := e.keys[start:]
	if e.style == styleNode {
		slices.Sort(keys)
	} else {
		sort.Sort(naturalKeys(keys))
	}
	defer func() { e.keys = e.keys[:start] }()
	for i, k := range keys {
		if i > 0 || !inline {
			e.spaces(indent)
		}
		if !e.scalar(k, true) {
			return false
		}
		e.buf = append(e.buf, ':')
		switch v := m[k].(type) {
		case map[string]any:
			if len(v) == 0 {
				e.buf = append(e.buf, " {}\n"...)
				continue
			}
			e.buf = append(e.buf, '\n')
			if !e.mapping(v, indent+2, false) {
				return false
			}
		case LastKey:
			if len(v.Map) == 0 || len(v.Value) == 0 {
				return false
			}
			e.buf = append(e.buf, '\n')
			if !e.mapping(v.Map, indent+2, false) || !e.mapping(map[string]any{v.Key: v.Value}, indent+2, false) {
				return false
			}
		case []any:
			if len(v) == 0 {
				e.buf = append(e.buf, " []\n"...)
				continue
			}
			e.buf = append(e.buf, '\n')
			if !e.sequence(v, indent) {
				return false
			}
		default:
			e.buf = append(e.buf, ' ')
			if !e.value(v, indent+2) {
				return false
			}
		}
	}
	return true
}

// sequence writes s at indent (compact: a sequence in a mapping is not indented further).
func (e *emitter) sequence(s []any, indent int) bool {
	for _, x := range s {
		e.spaces(indent)
		e.buf = append(e.buf, '-', ' ')
		switch v := x.(type) {
		case map[string]any:
			if len(v) == 0 {
				e.buf = append(e.buf, "{}\n"...)
				continue
			}
			if !e.mapping(v, indent+2, true) {
				return false
			}
		case []any:
			if len(v) > 0 {
				return false // "- - x": not a shape rendered objects have
			}
			e.buf = append(e.buf, "[]\n"...)
		default:
			if !e.value(v, indent+2) {
				return false
			}
		}
	}
	return true
}

// value writes a scalar and the line break; block is the indent of a literal block's lines.
func (e *emitter) value(v any, block int) bool {
	switch t := v.(type) {
	case string:
		if strings.IndexByte(t, '\n') >= 0 {
			return e.literal(t, block)
		}
		if !e.scalar(t, false) {
			return false
		}
	case int64:
		e.buf = strconv.AppendInt(e.buf, t, 10)
	case bool:
		e.buf = strconv.AppendBool(e.buf, t)
	case nil:
		e.buf = append(e.buf, "null"...)
	default:
		return false // floats and anything else: yaml.v3 decides
	}
	e.buf = append(e.buf, '\n')
	return true
}

// literal writes a multi-line string in the literal block style ("|" or "|-") the way
// yaml.v3 does; strings it would write otherwise (leading blank, trailing blank lines kept
// with "|+", spaces before a line break, characters beyond printable ASCII and tab) are
// left to yaml.v3.
func (e *emitter) literal(s string, indent int) bool {
	if s[0] == ' ' || s[0] == '\n' || strings.HasSuffix(s, "\n\n") || s[len(s)-1] == ' ' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\n' {
			if i > 0 && s[i-1] == ' ' {
				return false
			}
			continue
		}
		if c != '\t' && (c < 0x20 || c > 0x7e) {
			return false
		}
	}
	e.buf = append(e.buf, '|')
	if s[len(s)-1] != '\n' {
		e.buf = append(e.buf, '-')
	}
	e.buf = append(e.buf, '\n')
	for line := range strings.Lines(s) {
		if line != "\n" {
			e.spaces(indent)
		}
		e.buf = append(e.buf, line...)
	}
	if s[len(s)-1] != '\n' {
		e.buf = append(e.buf, '\n')
	}
	return true
}

// scalar writes a single-line string: plain when it is plainly a string, otherwise as
// yaml.v3 presents it on its own (the same in block context as a mapping value, a sequence
// item or a simple key, for the non-empty single-line strings of at most 128 bytes sent
// there).
func (e *emitter) scalar(s string, key bool) bool {
	if key && (s == "" || len(s) >= 128 || strings.IndexByte(s, '\n') >= 0) {
		return false // yaml.v3 writes such a key as a complex key ("? key")
	}
	if e.plain(s) {
		e.buf = append(e.buf, s...)
		return true
	}
	if q, ok := singleLine(s); ok {
		e.buf = append(e.buf, q...)
		return true
	}
	if q, ok := e.quoted[s]; ok {
		e.buf = append(e.buf, q...)
		return true
	}
	if !utf8.ValidString(s) || strings.ContainsAny(s, "\r\u0085\u2028\u2029") {
		// Invalid UTF-8 and line breaks other than \n (a key holding one is written as a
		// complex "? key") are left to yaml.v3.
		return false
	}
	var out []byte
	var err error
	if e.style == styleNode {
		out, err = yaml.Marshal(&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s})
	} else {
		out, err = yaml.Marshal(s)
	}
	if err != nil || len(out) == 0 || strings.IndexByte(string(out), '\n') != len(out)-1 {
		return false
	}
	q := string(out[:len(out)-1])
	e.quoted[s] = q
	e.buf = append(e.buf, q...)
	return true
}

// plain reports whether yaml.v3 writes s unquoted for certain: it starts with a letter or
// "/" (or is one of the digit-led strings of plainNumberLike), has only characters that are
// no YAML indicator where they stand, and is not a word YAML reads as a boolean or null.
func (e *emitter) plain(s string) bool {
	if s == "" {
		return false
	}
	if c := s[0]; c >= '0' && c <= '9' {
		return plainNumberLike(s)
	}
	if !isLetter(s[0]) && s[0] != '/' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case isLetter(c), c >= '0' && c <= '9', c == '.', c == '_', c == '/', c == '-', c == '=', c == '+', c == '@':
		case c == ':' && i < len(s)-1:
		default:
			return false
		}
	}
	switch s {
	case "true", "True", "TRUE", "false", "False", "FALSE", "null", "Null", "NULL":
		return false
	case "y", "Y", "yes", "Yes", "YES", "on", "On", "ON", "n", "N", "no", "No", "NO", "off", "Off", "OFF":
		return e.style == styleNode // YAML 1.1 booleans: quoted when encoding Go values
	}
	return true
}

// plainNumberLike reports whether a string that starts with a digit is certainly neither an
// int (any base), a float nor a timestamp to yaml.v3, so it is written plain: quantities and
// durations ("64Mi", "10m", "30s") have a letter no number or timestamp can hold (not e, t,
// z, no base prefix); versions ("580.95.05", "1.18.0") have two dots.
func plainNumberLike(s string) bool {
	if len(s) > 1 && s[0] == '0' && strings.IndexByte("xXbBoO", s[1]) >= 0 {
		return false
	}
	letter, dots, other := false, 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
		case c == '.':
			dots++
		case c == '-' || c == '/':
			other = true
		case isLetter(c):
			other = true
			if strings.IndexByte("eEtTzZ", c) < 0 {
				letter = true
			}
		default:
			return false
		}
	}
	return letter || (!other && dots >= 2)
}

// singleLine presents a printable-ASCII, single-line string that YAML reads as a string
// (not led by a sign, dot, digit or "~"; a letter-led one is no single word plain() turned
// down) the way yaml.v3's emitter does: plain unless an indicator, a leading or trailing space
// forbids it, then single-quoted (yaml_emitter_analyze_scalar, select_scalar_style). Others
// report false.
func singleLine(s string) (string, bool) {
	if s == "" || strings.IndexByte("+-.0123456789~", s[0]) >= 0 {
		return "", false
	}
	if isLetter(s[0]) && strings.IndexByte(s, ' ') < 0 {
		return "", false // a single word: plain() decided it, or it is one YAML reads otherwise
	}
	indicator := s[0] == ' ' || s[len(s)-1] == ' ' || strings.HasPrefix(s, "...")
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e {
			return "", false
		}
		followedBySpace := i+1 == len(s) || s[i+1] == ' '
		if i == 0 {
			switch c {
			case '#', ',', '[', ']', '{', '}', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`':
				indicator = true
			case '?', ':':
				indicator = indicator || followedBySpace
			}
			continue
		}
		switch c {
		case ':':
			indicator = indicator || followedBySpace
		case '#':
			indicator = indicator || s[i-1] == ' '
		}
	}
	if !indicator {
		return s, true
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'", true
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func (e *emitter) spaces(n int) {
	for range n {
		e.buf = append(e.buf, ' ')
	}
}
