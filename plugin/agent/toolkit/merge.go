package toolkit

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/pelletier/go-toml/v2"

	"github.com/gpupolicy/gpupolicy/plugin/agent/hostfs"
)

// table is a decoded TOML table.
type table = map[string]any

func parseTOML(name string, b []byte) (table, error) {
	if bytes.HasPrefix(b, []byte("\xef\xbb\xbf")) {
		return nil, fmt.Errorf("%s starts with a UTF-8 byte order mark (bytes EF BB BF, an editor's doing), which TOML does not allow: save the file as UTF-8 without a BOM (sed -i '1s/^\\xEF\\xBB\\xBF//' FILE) and retry", name)
	}
	t := table{}
	if err := toml.Unmarshal(b, &t); err != nil {
		return nil, tomlError(name, err)
	}
	return t, nil
}

func subTable(t table, key string) table {
	if s, ok := t[key].(table); ok {
		return s
	}
	return nil
}

// configVersion is a config's `version` (1 when absent, as containerd reads it).
func configVersion(t table) int {
	if v, ok := t["version"].(int64); ok {
		return int(v)
	}
	return 1
}

// importPatterns returns the config's imports as absolute host paths: containerd resolves a
// relative import against the directory of the importing file.
func importPatterns(t table, configHostPath string) []string {
	raw, _ := t["imports"].([]any)
	out := make([]string, 0, len(raw))
	for _, r := range raw {
		p, ok := r.(string)
		if !ok {
			continue
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(configHostPath), p)
		}
		out = append(out, p)
	}
	return out
}

// expandImports globs each pattern on the host, in containerd's order (patterns in order,
// matches sorted), leaving out exclude (our own drop-in) and the config itself.
func expandImports(root string, patterns []string, exclude, self string) ([]string, error) {
	var out []string
	for _, p := range patterns {
		matches, err := hostfs.Glob(root, p)
		if err != nil {
			return nil, fmt.Errorf("import pattern %q: %w", p, err)
		}
		for _, m := range matches {
			if !sameFile(root, m, exclude) && !sameFile(root, m, self) {
				out = append(out, m)
			}
		}
	}
	return out, nil
}

// sameFile reports whether two host paths name the same file once their links are followed
// (an import pattern may reach our drop-in or the main config through a linked directory).
func sameFile(root, a, b string) bool {
	if a == b {
		return true
	}
	if b == "" {
		return false
	}
	pa, errA := hostfs.Resolve(root, a)
	pb, errB := hostfs.Resolve(root, b)
	return errA == nil && errB == nil && pa.Real == pb.Real
}

// nodeBase is the node's own configuration without our drop-in: the plugin tables the
// merge starts from.
type nodeBase struct {
	Plugins table
	Source  string // "containerd config dump" or "config files"
}

// baseFromFiles emulates containerd's import semantics on the files: the main config's plugin
// tables, each replaced as a whole by a later import that names the same plugin (containerd <
// 2.1, replace) or merged key by key with it (2.1 on).
func baseFromFiles(root, configHostPath, exclude string, replace bool) (nodeBase, error) {
	b, err := readOptional(root, configHostPath)
	if err != nil || b == nil {
		return nodeBase{Plugins: table{}, Source: "config files (no main config)"}, err
	}
	main, err := parseTOML(configHostPath, b)
	if err != nil {
		return nodeBase{}, err
	}
	if len(main) == 0 { // empty or only comments: containerd's defaults, as if it were missing
		return nodeBase{Plugins: table{}, Source: "config files (empty main config)"}, nil
	}
	if v := configVersion(main); v < 2 {
		return nodeBase{}, fmt.Errorf("%s has config version %d: only `containerd config dump` can migrate it; make the containerd binary reachable (--containerd-bin) or migrate the file to version 2", configHostPath, v)
	}
	plugins := subTable(main, "plugins")
	if plugins == nil {
		plugins = table{}
	}
	files, err := expandImports(root, importPatterns(main, configHostPath), exclude, configHostPath)
	if err != nil {
		return nodeBase{}, err
	}
	for _, f := range files {
		ib, err := hostfs.ReadFile(root, f)
		if err != nil {
			return nodeBase{}, fmt.Errorf("containerd import of %s: %w", configHostPath, err)
		}
		it, err := parseTOML(f, ib)
		if err != nil {
			return nodeBase{}, err
		}
		for name, pt := range subTable(it, "plugins") {
			if st, ok := pt.(table); ok && !replace {
				dt, _ := plugins[name].(table)
				plugins[name] = deepMerge(dt, st)
				continue
			}
			plugins[name] = pt
		}
	}
	return nodeBase{Plugins: plugins, Source: "config files"}, nil
}

// Scratch files (host paths, so a chrooted containerd can read them) for dumps of
// configurations that are not the node's live one.
const (
	scratchConfig = "/var/lib/gpupolicy/containerd-scratch.toml"
	scratchDropIn = "/var/lib/gpupolicy/candidate-drop-in.toml"
)

// loadMain reads the node's main config; a missing file is an empty table.
func loadMain(root, configHostPath string) (table, error) {
	b, err := readOptional(root, configHostPath)
	if err != nil || b == nil {
		return table{}, err
	}
	return parseTOML(configHostPath, b)
}

// scratchDump asks the node's containerd for the effective configuration of the main config
// with its imports replaced by imports (host paths).
func scratchDump(ctx context.Context, h Host, bin string, main table, imports []string) (table, error) {
	scratch := table{}
	for k, v := range main {
		scratch[k] = v
	}
	list := make([]any, len(imports))
	for i, f := range imports {
		list[i] = f
	}
	scratch["imports"] = list
	b, err := toml.Marshal(scratch)
	if err != nil {
		return nil, err
	}
	if _, err := (hostfs.Writer{}).WriteOwned(h.Root, scratchConfig, b, 0o600); err != nil {
		return nil, err
	}
	defer func() { _, _ = hostfs.Writer{}.Remove(h.Root, scratchConfig) }()
	out, err := h.dump(ctx, bin, scratchConfig)
	if err != nil {
		return nil, err
	}
	return parseTOML("containerd config dump", out)
}

// baseFromDump asks the node's containerd for its full configuration minus our drop-in: a
// scratch copy of the main config whose imports list every imported file except ours.
func baseFromDump(ctx context.Context, h Host, bin, configHostPath, exclude string) (nodeBase, error) {
	main, err := loadMain(h.Root, configHostPath)
	if err != nil {
		return nodeBase{}, err
	}
	files, err := expandImports(h.Root, importPatterns(main, configHostPath), exclude, configHostPath)
	if err != nil {
		return nodeBase{}, err
	}
	dumped, err := scratchDump(ctx, h, bin, main, files)
	if err != nil {
		return nodeBase{}, err
	}
	return nodeBase{Plugins: subTable(dumped, "plugins"), Source: "containerd config dump"}, nil
}

// preflight proves containerd can load the node's configuration with the candidate drop-in
// before anything on the node changes: a config containerd cannot load would stop it from
// starting at its next restart.
func preflight(ctx context.Context, h Host, bin, configHostPath, dropIn string, candidate []byte) error {
	main, err := loadMain(h.Root, configHostPath)
	if err != nil {
		return err
	}
	files, err := expandImports(h.Root, importPatterns(main, configHostPath), dropIn, configHostPath)
	if err != nil {
		return err
	}
	if _, err := (hostfs.Writer{}).WriteOwned(h.Root, scratchDropIn, candidate, 0o600); err != nil {
		return err
	}
	defer func() { _, _ = hostfs.Writer{}.Remove(h.Root, scratchDropIn) }()
	if _, err := scratchDump(ctx, h, bin, main, append(files, scratchDropIn)); err != nil {
		return fmt.Errorf("containerd refused the drop-in: %w; nothing was written and containerd keeps running its previous configuration", err)
	}
	return nil
}

// deepMerge merges src into dst (src wins; tables merge key by key) and returns dst. Tables
// of src are copied, never shared, so merging into the result never changes src (the node's
// base is merged into a fresh table, then the rendered drop-in into that).
func deepMerge(dst, src table) table {
	if dst == nil {
		dst = table{}
	}
	for k, v := range src {
		if st, ok := v.(table); ok {
			dt, _ := dst[k].(table)
			dst[k] = deepMerge(dt, st)
			continue
		}
		dst[k] = v
	}
	return dst
}

// mergeDropIn returns the drop-in containerd < 2.1 needs: every plugin table the rendered
// drop-in touches is the node's whole table with the rendered keys merged on top, so the
// import's table replacement keeps the node's own settings. A runtime handler the drop-in
// defines replaces the node's handler of that name, as nvidia-ctk's does (inheritHandlers has
// already started it from the node's runc runtime).
func mergeDropIn(rendered table, base nodeBase) table {
	out := table{}
	for k, v := range rendered {
		out[k] = v
	}
	merged := table{}
	for name, pt := range subTable(rendered, "plugins") {
		rt, _ := pt.(table)
		bt, _ := base.Plugins[name].(table)
		bt = copyTable(bt)
		if runtimes := subTable(subTable(bt, "containerd"), "runtimes"); runtimes != nil {
			for handler := range subTable(subTable(rt, "containerd"), "runtimes") {
				delete(runtimes, handler)
			}
		}
		merged[name] = deepMerge(bt, rt)
	}
	out["plugins"] = merged
	return out
}

// encode renders a table with a header comment; go-toml sorts keys, so equal input gives
// equal bytes (idempotence depends on it).
func encode(header string, t table) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString(header)
	enc := toml.NewEncoder(&buf)
	enc.SetIndentTables(true)
	if err := enc.Encode(t); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// runtimesIn lists the runtime handler names a config defines under any plugin's
// containerd.runtimes table (v2: io.containerd.grpc.v1.cri, v3: io.containerd.cri.v1.runtime).
func runtimesIn(t table) []string {
	var out []string
	for _, pt := range subTable(t, "plugins") {
		p, _ := pt.(table)
		for name := range subTable(subTable(p, "containerd"), "runtimes") {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// runtimeBinaries maps each runtime handler of t that names its binary (options.BinaryName)
// to that path.
func runtimeBinaries(t table) map[string]string {
	out := map[string]string{}
	for _, pt := range subTable(t, "plugins") {
		p, _ := pt.(table)
		for name, rt := range subTable(subTable(p, "containerd"), "runtimes") {
			r, _ := rt.(table)
			if bin, ok := subTable(r, "options")["BinaryName"].(string); ok && bin != "" {
				out[name] = bin
			}
		}
	}
	return out
}
