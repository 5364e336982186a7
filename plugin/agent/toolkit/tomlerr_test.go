package toolkit

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every TOML parse error names the file, the line and the column.
func TestTOMLErrorsNameFileAndLine(t *testing.T) {
	badDropIn := filepath.Join(t.TempDir(), "drop-in.toml")
	if err := os.WriteFile(badDropIn, []byte("version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, dropIn string
		main         []byte
		imported     string // an imported file's body, at /etc/containerd/site/site.toml
		want         string
	}{
		{"main config", testdata(t, "dropin-v2.toml"), []byte("version = 2\nimports = [\"/a/*.toml\"\n"), "",
			DefaultConfigPath + ": line 2, column 23: not valid TOML: toml: array is incomplete"},
		{"duplicate key", testdata(t, "dropin-v2.toml"), []byte("version = 2\n\n[plugins.x]\n  a = 1\n  a = 2\n"), "",
			DefaultConfigPath + ": line 5, column 3: not valid TOML: toml: key a is already defined"},
		{"drop-in", badDropIn, nil, "",
			"--drop-in " + badDropIn + ": line 3, column 64: not valid TOML: toml: expected ']' to close table name"},
		{"import", testdata(t, "dropin-v2.toml"), []byte("version = 2\nimports = [\"site/*.toml\"]\n"), "version = 2\n[plugins.\"x\"]\n  b = \xe9\n",
			"/etc/containerd/site/site.toml: line 3, column 7: not valid TOML: toml: unexpected character U+00E9"},
	} {
		root, in := fileHost(t, c.main, "1.7", c.dropIn)
		if c.imported != "" {
			p := filepath.Join(root, "/etc/containerd/site/site.toml")
			_ = os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(c.imported), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		_, err := in.Install(context.Background())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\nwant %s", c.name, err, c.want)
		}
		assertUntouched(t, root, c.main)
	}
}
