package toolkit

import (
	"strings"
	"testing"
)

func TestWithImport(t *testing.T) {
	const pat = "/etc/containerd/conf.d/*.toml"
	cases := []struct{ name, in, want string }{
		{"empty file", "", "version = 2\nimports = [\"" + pat + "\"]\n"},
		{"after version", "version = 2\n[plugins.x]\n  a = 1\n", "version = 2\nimports = [\"" + pat + "\"]\n[plugins.x]\n  a = 1\n"},
		{"comments only", "# managed by hand\n", "version = 2\nimports = [\"" + pat + "\"]\n# managed by hand\n"},
		{"existing list", "version = 2\nimports = [\"/a/*.toml\"] # site\n", "version = 2\nimports = [\"/a/*.toml\", \"" + pat + "\"] # site\n"},
		{"empty list", "version = 2\nimports = []\n", "version = 2\nimports = [ \"" + pat + "\"]\n"},
		{"multi-line trailing comma with brackets in a glob", "version = 2\nimports = [\n  \"/a/[0-9]*.toml\", # one\n]\n",
			"version = 2\nimports = [\n  \"/a/[0-9]*.toml\", # one\n \"" + pat + "\"]\n"},
		{"imports of a table is not top level", "version = 2\n[x]\nimports = [\"y\"]\n", "version = 2\nimports = [\"" + pat + "\"]\n[x]\nimports = [\"y\"]\n"},
	}
	for _, c := range cases {
		got, err := withImport([]byte(c.in), DefaultConfigPath, pat, 2)
		if err != nil || string(got) != c.want {
			t.Errorf("%s:\n got %q (%v)\nwant %q", c.name, got, err, c.want)
		}
	}
	if _, err := withImport([]byte("version = 2\nimports = [\"a\"\n"), DefaultConfigPath, pat, 2); err == nil || !strings.Contains(err.Error(), "not valid TOML") {
		t.Errorf("broken array: %v", err)
	}
}

func TestImportsCovers(t *testing.T) {
	tb, _ := parseTOML("t", []byte("imports = [\"conf.d/*.toml\"]\n"))
	if !importsCovers(tb, DefaultConfigPath, "/etc/containerd/conf.d/99-gpupolicy-nvidia.toml") {
		t.Error("relative glob not resolved against the config's directory")
	}
	if importsCovers(tb, DefaultConfigPath, "/etc/other/99-gpupolicy-nvidia.toml") {
		t.Error("foreign path covered")
	}
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]Version{"1.6": {1, 6}, "1.7.27": {1, 7}, "v2.1.0": {2, 1}, "1.6.20~ds1": {1, 6}} {
		if got, err := ParseVersion(in); err != nil || got != want {
			t.Errorf("%s: %v %v", in, got, err)
		}
	}
	if _, err := ParseVersion("latest"); err == nil {
		t.Error("latest accepted")
	}
	if !(Version{2, 0}).ReplacesPluginTables() || (Version{2, 1}).ReplacesPluginTables() || (Version{1, 7}).ConfigVersion() != 2 || (Version{2, 0}).ConfigVersion() != 3 {
		t.Error("version rules")
	}
}

func BenchmarkMergeDropIn(b *testing.B) {
	node := must(parseTOML("node", []byte(strings.Repeat("", 0)+nodeV2Bench)))
	rendered := must(parseTOML("drop-in", []byte(dropInV2Bench)))
	base := nodeBase{Plugins: subTable(node, "plugins"), Source: "bench"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := encode("", mergeDropIn(rendered, base)); err != nil {
			b.Fatal(err)
		}
	}
}

const nodeV2Bench = `version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.example/pause:3.9"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "/etc/containerd/certs.d"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = true
`

const dropInV2Bench = `version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
    BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime"
`
