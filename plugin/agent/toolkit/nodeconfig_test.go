package toolkit

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// fileHost is a fake host root whose main config holds body (absent when body is nil), and an
// installer for it that verifies by config files (no containerd binary, no daemon).
func fileHost(t *testing.T, body []byte, version, dropIn string) (string, *Installer) {
	t.Helper()
	root := t.TempDir()
	if body != nil {
		p := filepath.Join(root, DefaultConfigPath)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root, &Installer{HostRoot: root, DropInSource: dropIn, ContainerdVersion: version,
		RestartMode: RestartNone, ContainerdBinary: NoBinary, ProcDir: emptyProc()}
}

// assertUntouched checks a refused install wrote nothing: the main config is as it was
// (absent when before is nil), no drop-in, no status file.
func assertUntouched(t *testing.T, root string, before []byte) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(root, DefaultConfigPath))
	if before == nil && !os.IsNotExist(err) || before != nil && string(got) != string(before) {
		t.Errorf("main config changed: %q %v", got, err)
	}
	for _, p := range []string{DefaultDropInDir + "/" + config.DropInFile, config.ToolkitStatusFile} {
		if _, err := os.Stat(filepath.Join(root, p)); !os.IsNotExist(err) {
			t.Errorf("%s written", p)
		}
	}
}

// An empty (or whitespace or comments-only) main config is containerd's defaults, the same as
// a missing one, on every containerd version.
func TestInstallEmptyMainConfigIsMissing(t *testing.T) {
	for _, c := range []struct{ version, dropIn string }{{"1.6", "dropin-v2.toml"}, {"1.7", "dropin-v2.toml"}, {"2.0", "dropin-v3.toml"}, {"2.1", "dropin-v3.toml"}} {
		for name, body := range map[string][]byte{"missing": nil, "empty": {}, "blank": []byte("\n  \n\t\n"), "comments": []byte("# set up by hand\n\n# nothing yet\n")} {
			root, in := fileHost(t, body, c.version, testdata(t, c.dropIn))
			res, err := in.Install(context.Background())
			if err != nil || !installedNoCRI(res) {
				t.Errorf("containerd %s, %s main config: %+v %v", c.version, name, res, err)
				continue
			}
			main := string(must(os.ReadFile(filepath.Join(root, DefaultConfigPath))))
			want := "version = " + map[string]string{"dropin-v2.toml": "2", "dropin-v3.toml": "3"}[c.dropIn] + "\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n"
			if !strings.HasPrefix(main, want) {
				t.Errorf("containerd %s, %s main config became %q", c.version, name, main)
			}
		}
	}
}

// A node config (or a rendered drop-in) in another schema than the containerd version given
// is refused before anything is written: a version 3 file on containerd 1.7 would stop
// containerd at its next start.
func TestInstallRefusesConfigVersionMismatch(t *testing.T) {
	v2, v3 := must(os.ReadFile(testdata(t, "node-v2.toml"))), must(os.ReadFile(testdata(t, "node-v3.toml")))
	for _, c := range []struct {
		name, version, dropIn string
		main                  []byte
		want                  string
	}{
		{"v3 node config on 1.7", "1.7", "dropin-v2.toml", v3,
			DefaultConfigPath + " has config version 3 but containerd 1.7 (--containerd-version, spec.containerRuntime.version) reads version 2: re-render the policy with spec.containerRuntime.version set to this node's containerd minor (`containerd --version`) if the node does not run containerd 1.7, or fix the node config"},
		{"v2 node config on 2.1", "2.1", "dropin-v3.toml", v2,
			DefaultConfigPath + " has config version 2 but containerd 2.1 (--containerd-version, spec.containerRuntime.version) reads version 3: re-render the policy with spec.containerRuntime.version set to this node's containerd minor (`containerd --version`) if the node does not run containerd 2.1, or, if it does, migrate the node config to version 3 (`containerd config migrate` prints it), review it and retry"},
		{"quoted version", "1.7", "dropin-v2.toml", []byte("version = \"2\"\n"),
			DefaultConfigPath + `: version = "2" is not an integer: containerd reads ` + "`version = 2`" + ` (a bare number) for containerd 1.7; fix the node config`},
		{"version 1", "1.7", "dropin-v2.toml", []byte("root = \"/var/lib/containerd\"\n"),
			DefaultConfigPath + " is a version 1 containerd config (no `version = 2`)"},
		{"v3 drop-in on 1.7", "1.7", "dropin-v3.toml", nil,
			"dropin-v3.toml has config version 3 but containerd 1.7 (--containerd-version) reads version 2: the drop-in and --containerd-version come from different policies"},
		{"v2 drop-in on 2.1", "2.1", "dropin-v2.toml", v3,
			"dropin-v2.toml has config version 2 but containerd 2.1 (--containerd-version) reads version 3"},
	} {
		root, in := fileHost(t, c.main, c.version, testdata(t, c.dropIn))
		res, err := in.Install(context.Background())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %+v %v\nwant %s", c.name, res, err, c.want)
		}
		assertUntouched(t, root, c.main)
	}
}

// The same with the node's real containerd 1.6, which reads the node's config by dump: an
// empty main config installs, and containerd loads the handler from it.
func TestInstallRealContainerdEmptyMainConfig(t *testing.T) {
	if !runInNamespace(t) {
		return
	}
	if err := os.WriteFile(DefaultConfigPath, []byte("# empty for now\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := newInstaller(testdata(t, "dropin-v2.toml")).Install(context.Background())
	if err != nil || !installedNoCRI(res) {
		t.Fatalf("install: %+v %v", res, err)
	}
	if got := dig(dumpNode(t), "plugins", criV2, "containerd", "runtimes", "nvidia", "runtime_type"); got != "io.containerd.runc.v2" {
		t.Fatalf("nvidia runtime not loaded: %v", got)
	}
}
