package toolkit

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

var (
	importsKeyRE = regexp.MustCompile(`(?m)^[ \t]*imports[ \t]*=[ \t]*\[`)
	tableHeadRE  = regexp.MustCompile(`(?m)^[ \t]*\[`)
	versionKeyRE = regexp.MustCompile(`(?m)^[ \t]*version[ \t]*=.*\n?`)
)

// importsCovers reports whether one of the config's import patterns matches dropInHostPath.
func importsCovers(t table, configHostPath, dropInHostPath string) bool {
	for _, p := range importPatterns(t, configHostPath) {
		if ok, _ := filepath.Match(p, dropInHostPath); ok {
			return true
		}
	}
	return false
}

// withImport returns the main config text with pattern appended to its top-level imports
// (created when missing). It edits the text rather than re-encoding the TOML, so the node's
// comments and layout survive; the result is parsed again to prove the edit.
func withImport(src []byte, configHostPath, pattern string, configVersion int) ([]byte, error) {
	entry := fmt.Sprintf("%q", pattern)
	text := string(src)
	cur, err := parseTOML(configHostPath, src)
	if err != nil {
		return nil, err
	}
	if _, ok := cur["version"]; !ok {
		// Only an empty or comment-only file gets here (Install refuses version 1 configs);
		// without a version containerd would read the file as version 1.
		text = fmt.Sprintf("version = %d\n", configVersion) + text
	}
	firstTable := len(text)
	if loc := tableHeadRE.FindStringIndex(text); loc != nil {
		firstTable = loc[0]
	}
	var out string
	if loc := importsKeyRE.FindStringIndex(text); loc != nil && loc[0] < firstTable {
		end, err := arrayEnd(text, loc[1])
		if err != nil {
			return nil, fmt.Errorf("%s: imports: %w", configHostPath, err)
		}
		sep := ", "
		if last := lastSignificant(text[loc[1]:end]); last == 0 || last == ',' {
			sep = " "
		}
		out = text[:end] + sep + entry + text[end:]
	} else {
		line := "imports = [" + entry + "]\n"
		// Top-level keys must come before the first table; after `version` reads best.
		at := 0
		if loc := versionKeyRE.FindStringIndex(text); loc != nil && loc[0] < firstTable {
			at = loc[1]
			if !strings.HasSuffix(text[:at], "\n") {
				line = "\n" + line
			}
		}
		out = text[:at] + line + text[at:]
	}
	t, err := parseTOML(configHostPath+" (after adding the import)", []byte(out))
	if err != nil {
		return nil, err
	}
	if !slices.Contains(importPatterns(t, configHostPath), pattern) {
		return nil, fmt.Errorf("%s: could not add %s to imports; add it by hand", configHostPath, entry)
	}
	return []byte(out), nil
}

// arrayEnd returns the index of the `]` closing the array whose body starts at i, skipping
// strings (glob patterns may contain brackets) and comments.
func arrayEnd(s string, i int) (int, error) {
	for ; i < len(s); i++ {
		switch s[i] {
		case ']':
			return i, nil
		case '#', '"', '\'':
			i = skipCommentOrString(s, i)
		}
	}
	return 0, fmt.Errorf("unterminated array")
}

// lastSignificant returns the last byte of s outside comments and whitespace (a closing
// quote for a string), or 0 when there is none.
func lastSignificant(s string) byte {
	var last byte
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '#':
			i = skipCommentOrString(s, i)
		case '"', '\'':
			i = skipCommentOrString(s, i)
			last = c
		case ' ', '\t', '\n', '\r':
		default:
			last = c
		}
	}
	return last
}

// skipCommentOrString returns the index of the newline ending the comment, or of the quote
// closing the string, that starts at s[i] (len(s) when it runs to the end). Only basic
// strings ("...") have escapes.
func skipCommentOrString(s string, i int) int {
	switch c := s[i]; c {
	case '#':
		for i < len(s) && s[i] != '\n' {
			i++
		}
	case '"', '\'':
		for i++; i < len(s) && s[i] != c; i++ {
			if c == '"' && s[i] == '\\' {
				i++
			}
		}
	}
	return i
}
