package toolkit

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
)

// FuzzMerge feeds random node configs and rendered drop-ins through the merge (containerd
// < 2.1) and the import edit of the main config. Whatever the input: no panic; a merged
// drop-in that encodes parses again, holds every key the drop-in sets and every node setting
// of each plugin table it touches (unless the drop-in sets that key or a table above it); a
// main config the import edit accepts parses, imports the drop-in directory after its own
// imports and keeps every other setting as it was.
// Run: go test ./plugin/agent/toolkit -run '^$' -fuzz FuzzMerge -fuzztime 2m
func FuzzMerge(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.toml")
	var seeds []string
	for _, p := range files {
		seeds = append(seeds, string(must(os.ReadFile(p))))
	}
	seeds = append(seeds,
		"",
		"# comments only\n",
		"version = 2\nimports = [\"a/*.toml\", # [x]\n  \"b[0-9].toml\"]\n[plugins.x]\n  y = 1\n",
		"imports = []\nversion = 2\n",
		"version = 2\ns = \"\"\"\n[not.a.table]\nimports = [\n\"\"\"\n",
		"version = 2\n  imports = [ ]   # trailing\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = 'x'\n",
	)
	for _, n := range seeds {
		for _, d := range seeds[:len(files)] {
			f.Add(n, d)
		}
	}
	f.Fuzz(func(t *testing.T, nodeText, dropInText string) {
		node, errNode := parseTOML("node", []byte(nodeText))
		drop, errDrop := parseTOML("drop-in", []byte(dropInText))
		if errNode == nil && errDrop == nil {
			checkMerge(t, node, drop)
		}
		checkImportEdit(t, nodeText, node, errNode)
	})
}

func checkMerge(t *testing.T, node, drop table) {
	base := nodeBase{Plugins: subTable(node, "plugins"), Source: "fuzz"}
	nodeLeaves := map[string][]leaf{}
	for name, pt := range base.Plugins {
		bt, _ := pt.(table)
		nodeLeaves[name] = leaves(bt, nil)
	}
	merged := mergeDropIn(drop, base)
	out, err := encode(header(rendered{sha256: "fuzz"}, Version{1, 7}, base, ""), merged)
	if err != nil {
		return // refused: nothing is installed
	}
	got, err := parseTOML("merged drop-in", out)
	if err != nil {
		t.Fatalf("merged drop-in does not parse: %v\n%s", err, out)
	}
	for name, pt := range subTable(drop, "plugins") {
		rt, _ := pt.(table)
		for _, leaf := range leaves(rt, nil) {
			path := append([]string{"plugins", name}, leaf.path...)
			if !sameValue(dig(got, path...), leaf.value) {
				t.Fatalf("drop-in setting %v lost: %v, want %v\n%s", path, dig(got, path...), leaf.value, out)
			}
		}
		handlers := subTable(subTable(rt, "containerd"), "runtimes")
		for _, leaf := range nodeLeaves[name] {
			if setAbove(rt, leaf.path) {
				continue
			}
			// The node's table of a handler the drop-in defines is replaced, as nvidia-ctk does.
			if p := leaf.path; len(p) > 2 && p[0] == "containerd" && p[1] == "runtimes" && handlers[p[2]] != nil {
				continue
			}
			path := append([]string{"plugins", name}, leaf.path...)
			if !sameValue(dig(got, path...), leaf.value) {
				t.Fatalf("node setting %v lost: %v, want %v\n%s", path, dig(got, path...), leaf.value, out)
			}
		}
	}
}

func checkImportEdit(t *testing.T, text string, node table, parseErr error) {
	const pattern = "/etc/containerd/conf.d/*.toml"
	out, err := withImport([]byte(text), DefaultConfigPath, pattern, 2)
	if err != nil {
		return // refused: the main config is not touched
	}
	if parseErr != nil {
		t.Fatalf("import added to a config that does not parse:\n%s", text)
	}
	got, err := parseTOML("edited", out)
	if err != nil {
		t.Fatalf("edited main config does not parse: %v\n%s", err, out)
	}
	wantImports := append(slices.Clone(importPatterns(node, DefaultConfigPath)), pattern)
	if have := importPatterns(got, DefaultConfigPath); !slices.Equal(have, wantImports) {
		t.Fatalf("imports %q, want %q\n%s", have, wantImports, out)
	}
	if _, had := node["version"]; had && !sameValue(got["version"], node["version"]) {
		t.Fatalf("version changed: %v -> %v", node["version"], got["version"])
	}
	for k, v := range node {
		if k == "imports" {
			continue
		}
		if !sameValue(got[k], v) {
			t.Fatalf("main config setting %q changed by the import edit: %v -> %v\n%s", k, v, got[k], out)
		}
	}
	for k := range got {
		if _, ok := node[k]; !ok && k != "imports" && k != "version" {
			t.Fatalf("import edit added %q:\n%s", k, out)
		}
	}
}

type leaf struct {
	path  []string
	value any
}

// leaves lists every non-table value under t with its key path, sorted.
func leaves(t table, prefix []string) []leaf {
	var out []leaf
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p := append(slices.Clone(prefix), k)
		if sub, ok := t[k].(table); ok {
			out = append(out, leaves(sub, p)...)
			continue
		}
		out = append(out, leaf{p, t[k]})
	}
	return out
}

// setAbove reports whether t sets path itself or a non-table value on its way.
func setAbove(t table, path []string) bool {
	cur := t
	for i, k := range path {
		v, ok := cur[k]
		if !ok {
			return false
		}
		sub, isTable := v.(table)
		if !isTable || i == len(path)-1 {
			return true
		}
		cur = sub
	}
	return false
}

// sameValue compares decoded TOML values by their Go syntax: types must match, and NaN
// equals NaN.
func sameValue(a, b any) bool {
	return fmt.Sprintf("%T %#v", a, a) == fmt.Sprintf("%T %#v", b, b)
}
