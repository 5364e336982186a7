package cli

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/plugin/nodefacts/hostfacts"
)

func run(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// --help is the manual: every subcommand and every one of its flags.
func TestHelpDocumentsEverything(t *testing.T) {
	code, out, _ := run("--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, c := range commands() {
		if !strings.Contains(out, "gpu-node-agent "+c.name+"\n") {
			t.Errorf("help lacks subcommand %q", c.name)
		}
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.flags(fs)
		fs.VisitAll(func(f *flag.Flag) {
			if !strings.Contains(out, "-"+f.Name+" ") && !strings.Contains(out, "-"+f.Name+"\n") {
				t.Errorf("help lacks %s --%s", c.name, f.Name)
			}
			if f.Usage == "" {
				t.Errorf("%s --%s has no usage text", c.name, f.Name)
			}
		})
	}
	// A group's --help is the group's manual, not an unknown subcommand.
	for _, help := range []string{"--help", "-h", "help"} {
		code, out, errs := run("toolkit", help)
		if code != 0 || errs != "" || !strings.HasPrefix(out, "Usage: gpu-node-agent toolkit install | uninstall [flags]\n") ||
			!strings.Contains(out, "gpu-node-agent toolkit install\n") || !strings.Contains(out, "gpu-node-agent toolkit uninstall\n") ||
			!strings.Contains(out, "-containerd-version") || strings.Contains(out, "gpu-node-agent gate\n") {
			t.Errorf("toolkit %s: exit %d, stdout:\n%s\nstderr: %s", help, code, out, errs)
		}
	}
	if code, _, errs := run("toolkit"); code != 2 || !strings.Contains(errs, "want a subcommand: install | uninstall (gpu-node-agent toolkit --help)") {
		t.Errorf("toolkit without a subcommand: exit %d: %s", code, errs)
	}
	for _, bad := range [][]string{{"frobnicate"}, {"toolkit"}, {"toolkit", "reinstall"}} {
		if code, _, _ := run(bad...); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
}

const agentYAML = `interval: 30s
driver: {source: preinstalled, version: "580.95.05", enforce: branch}
cudaVersion: "12.8"
containerRuntime: {name: containerd, version: "2.1", configPath: /etc/containerd/config.toml, dropInDir: /etc/containerd/conf.d, socket: /run/containerd/containerd.sock, restartMode: none}
toolkit: {source: container, version: 1.18.0, runtimeClassName: nvidia, runtimePath: /usr/local/nvidia/toolkit/nvidia-container-runtime, cdi: true, dropInSHA256: 8d32d3c0925e245d5953ad43921355a74d29789c2359fc6a101fd0d723c186e1}
stages: {featureDiscovery: true, exporter: true}
devicePlugin: {resourceName: nvidia.com/gpu, migStrategy: none, deviceListStrategy: cdi-cri, sharing: {timeSlicing: {replicas: 2}}, healthChecks: {enabled: true, ignoredXIDs: [13]}}
`

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLabelsDryRunWithMock(t *testing.T) {
	code, out, errs := run("labels", "--config", writeConfig(t, agentYAML), "--node", "", "--nvml-mock", "dgxa100", "--mock-driver-version", "580.95.05", "--mock-cuda-version", "13.0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"nvidia.com/gpu.count=8\n", "nvidia.com/gpu.replicas=2\n", "nvidia.com/cuda.driver-version.full=580.95.05\n", "nvidia.com/cuda.runtime-version.full=13.0\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("labels lack %q:\n%s", want, out)
		}
	}
}

func TestDriverWithMock(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, hostfacts.KernelDriverFile)
	_ = os.MkdirAll(filepath.Dir(p), 0o755)
	_ = os.WriteFile(p, []byte("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 30 00:00:00 UTC 2025\n"), 0o644)
	cfg := writeConfig(t, agentYAML)
	code, out, errs := run("driver", "--config", cfg, "--host-root", root, "--node", "", "--nvml-mock", "dgxa100", "--mock-driver-version", "580.95.05", "--mock-cuda-version", "13.0")
	if code != 0 || !strings.Contains(out, `"Satisfied":true`) {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
	// The mock's own driver (550.54.15) differs from the kernel module: user space and kernel disagree.
	code, _, errs = run("driver", "--config", cfg, "--host-root", root, "--node", "", "--nvml-mock", "dgxa100")
	if code != 1 || !strings.Contains(errs, "user-space and kernel driver differ") {
		t.Fatalf("exit %d: %s", code, errs)
	}
}

// Every path flag of every subcommand is refused when relative, at start-up, with exit 2.
func TestRelativePathFlagsAreRefused(t *testing.T) {
	cfg := writeConfig(t, agentYAML)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"gate", "--config", cfg, "--node", "n", "--host-root", "host"}, `gpu-node-agent gate: --host-root "host" is a relative path: give an absolute path such as /host (the default)`},
		{[]string{"driver", "--config", cfg, "--host-root", "./host"}, `gpu-node-agent driver: --host-root "./host" is a relative path`},
		{[]string{"toolkit", "install", "--containerd-version", "2.1", "--config-path", "etc/containerd/config.toml"}, `gpu-node-agent toolkit install: --config-path "etc/containerd/config.toml" is a relative path: give an absolute path such as /etc/containerd/config.toml (the default)`},
		{[]string{"toolkit", "install", "--containerd-version", "2.1", "--drop-in-dir", "conf.d"}, `--drop-in-dir "conf.d" is a relative path`},
		{[]string{"toolkit", "install", "--containerd-version", "2.1", "--containerd-bin", "bin/containerd"}, `--containerd-bin "bin/containerd" is a relative path`},
		{[]string{"toolkit", "install", "--containerd-version", "2.1", "--cdi-spec", "nvidia.yaml"}, `--cdi-spec "nvidia.yaml" is a relative path`},
		{[]string{"toolkit", "install", "--containerd-version", "2.1", "--nvidia-ctk", "nvidia-ctk"}, `--nvidia-ctk "nvidia-ctk" is a relative path`},
		{[]string{"toolkit", "install", "--containerd-version", "2.1", "--containerd-socket", "run/containerd/containerd.sock"}, `--containerd-socket "run/containerd/containerd.sock" is a relative path: give an absolute path such as /run/containerd/containerd.sock (the default)`},
		{[]string{"toolkit", "install", "--containerd-version", "2.1", "--cdi-driver-root", "run/nvidia/driver"}, `--cdi-driver-root "run/nvidia/driver" is a relative path`},
		{[]string{"toolkit", "uninstall", "--proc", "proc"}, `gpu-node-agent toolkit uninstall: --proc "proc" is a relative path: give an absolute path such as /proc (the default)`},
	} {
		if code, out, errs := run(c.args...); code != 2 || out != "" || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %s; want exit 2 with %s", c.args, code, out, errs, c.want)
		}
	}
}

func TestBadConfigNamesField(t *testing.T) {
	code, _, errs := run("gate", "--config", writeConfig(t, strings.Replace(agentYAML, "enforce: branch", "enforce: strict", 1)), "--node", "n")
	if code != 1 || !strings.Contains(errs, "driver.enforce") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	code, _, errs = run("gate", "--config", writeConfig(t, agentYAML+"bogus: 1\n"), "--node", "n")
	if code != 1 || !strings.Contains(errs, "bogus") {
		t.Fatalf("unknown field: exit %d: %s", code, errs)
	}
}

func TestToolkitInstallCLI(t *testing.T) {
	root, dropIn, proc := toolkitHost(t)
	args := []string{"toolkit", "install", "--host-root", root, "--drop-in", dropIn, "--containerd-version", "2.1", "--restart-mode", "none", "--containerd-bin", "none", "--proc", proc,
		"--containerd-socket", "/run/k3s/containerd/containerd.sock"}
	// No containerd serves the socket: installed, not verified, and the reason names the
	// socket and the flag (the real daemons are in package toolkit's tests).
	want := "cannot reach containerd's CRI at /run/k3s/containerd/containerd.sock: no such socket"
	if code, out, errs := run(args...); code != 1 || !strings.Contains(out, `"Verified":false`) || !strings.Contains(errs, want) || !strings.Contains(errs, "--containerd-socket") {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
	st, err := hostfacts.ReadToolkitStatus(root)
	if err != nil || st.Verified || !strings.Contains(st.Reason, want) || len(st.Handlers) != 0 {
		t.Fatalf("%+v %v", st, err)
	}
	if code, _, errs := run("toolkit", "install", "--host-root", root, "--drop-in", dropIn); code != 2 || !strings.Contains(errs, "--containerd-version is required") {
		t.Fatalf("missing version: %d %s", code, errs)
	}
	if code, out, _ := run("toolkit", "uninstall", "--host-root", root, "--restart-mode", "none"); code != 0 || out != "removed: true\n" {
		t.Fatalf("uninstall: %d %q", code, out)
	}
}

// toolkitHost is an empty fake host root, a rendered containerd 2.1 drop-in and a /proc
// without containerd.
func toolkitHost(t *testing.T) (root, dropIn, proc string) {
	t.Helper()
	root, proc = t.TempDir(), t.TempDir()
	dropIn = filepath.Join(t.TempDir(), "99-gpupolicy-nvidia.toml")
	rendered := "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia]\n  runtime_type = \"io.containerd.runc.v2\"\n"
	if err := os.WriteFile(dropIn, []byte(rendered), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "uptime"), []byte("100.0 100.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, dropIn, proc
}

// Every flag of toolkit install and uninstall is checked before anything on the node is read
// or written: a bad value is exit 2 naming the flag and the fix, and the host root is as it was
// (a bogus --restart-mode used to be refused after config.toml was rewritten).
func TestToolkitFlagsCheckedBeforeAnyWrite(t *testing.T) {
	root, dropIn, proc := toolkitHost(t)
	cfg := filepath.Join(root, "etc/containerd/config.toml")
	if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte("version = 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	installed := filepath.Join(root, "etc/containerd/conf.d/99-gpupolicy-nvidia.toml")
	if err := os.MkdirAll(filepath.Dir(installed), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(installed, []byte("# installed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"toolkit", "install", "--host-root", root, "--drop-in", dropIn, "--containerd-version", "2.1", "--containerd-bin", "none", "--proc", proc}
	un := []string{"toolkit", "uninstall", "--host-root", root, "--proc", proc}
	for _, c := range []struct {
		args []string
		want string
		code int // 0: 2 (a flag); the drop-in's contents are exit 1
	}{
		{append(base, "--restart-mode", "bogus"), `gpu-node-agent toolkit install: --restart-mode "bogus" is not systemd | signal | none: use systemd (systemctl restart --systemd-unit), signal (SIGTERM to containerd; needs hostPID) or none (restart containerd yourself)`, 0},
		{append(un, "--restart-mode", "bogus"), `gpu-node-agent toolkit uninstall: --restart-mode "bogus" is not systemd | signal | none`, 0},
		{append(base, "--systemd-unit", "--now"), `gpu-node-agent toolkit install: --systemd-unit "--now" is not a systemd unit name (letters, digits and :_.@\-, not starting with -): set containerd's unit, e.g. containerd.service`, 0},
		{append(un, "--systemd-unit", "a b"), `--systemd-unit "a b" is not a systemd unit name`, 0},
		{append(base, "--systemd-unit", ""), `--systemd-unit is empty: set containerd's unit (default containerd.service)`, 0},
		{append(base, "--restart-timeout", "0s"), `--restart-timeout 0s: give how long to wait for containerd after a restart, above 0s and at most 30m0s (default 1m30s)`, 0},
		{append(base, "--restart-timeout", "-1s"), `--restart-timeout -1s is out of range: give a duration above 0s and at most 30m0s (default 1m30s)`, 0},
		{append(base, "--restart-timeout", "2h"), `--restart-timeout 2h0m0s is out of range`, 0},
		{append(base, "--drop-in", ""), `--drop-in is empty: give the rendered drop-in's path`, 0},
		{append(base, "--containerd-version", "1.x"), `--containerd-version "1.x" is not a containerd minor X.Y (no "v", no patch: ` + "`containerd --version`" + ` 1.7.27 is 1.7): use one of 1.6, 1.7, 2.0, 2.1, 2.2 (spec.containerRuntime.version)`, 0},
		{append(base, "--containerd-version", "1.8"), `--containerd-version "1.8": containerd 1.8 was never released (the minors are 1.6, 1.7, 2.0, 2.1, 2.2): use the node's minor from ` + "`containerd --version`", 0},
		{append(base, "--containerd-version", "1.10"), `--containerd-version "1.10": containerd 1.10 was never released`, 0},
		{append(base, "--containerd-version", "1.5"), `--containerd-version "1.5": containerd 1.5 is older than the oldest supported minor 1.6: upgrade containerd on the nodes to one of 1.6, 1.7, 2.0, 2.1, 2.2`, 0},
		{append(base, "--containerd-version", "v1.7"), `--containerd-version "v1.7" is not a containerd minor X.Y`, 0},
		{append(base, "--containerd-version", "1.7.1"), `--containerd-version "1.7.1" is not a containerd minor X.Y`, 0},
		{append(base, "--drop-in-dir", "/etc/containerd"), `--drop-in-dir /etc/containerd is the directory of --config-path /etc/containerd/config.toml or above it: the import "/etc/containerd/*.toml" would load config.toml itself and every .toml file there as drop-ins; use a directory of its own below it, e.g. /etc/containerd/conf.d (spec.containerRuntime.dropInDir)`, 0},
		{append(base, "--drop-in-dir", "/etc"), `--drop-in-dir /etc is the directory of --config-path /etc/containerd/config.toml or above it`, 0},
		{append(base, "--drop-in-dir", "/"), `--drop-in-dir / is the directory of --config-path /etc/containerd/config.toml or above it: the import "/*.toml"`, 0},
		{append(base, "--runtime-class-name", "runc"), `--runtime-class-name "runc" is a runtime the nodes already have`, 0},
		{append(base, "--runtime-class-name", "gpu"), `defines runtime handler "nvidia", not --runtime-class-name "gpu": render the drop-in and the flag from one policy (spec.toolkit.runtimeClassName)`, 1},
		{append(base, "--drop-in", writeDropIn(t, "[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n")),
			`defines runtime handlers nvidia, runc: gpupolicy installs one, spec.toolkit.runtimeClassName; re-render the policy and mount ConfigMap`, 1},
		{append(base, "--drop-in", writeDropIn(t, "[plugins.\"io.containerd.cri.v1.runtime\".containerd]\n  default_runtime_name = \"runc\"\n")),
			`sets plugins."io.containerd.cri.v1.runtime".containerd.default_runtime_name = runc: the drop-in may make only its own handler "nvidia" the default (spec.toolkit.setAsDefault)`, 1},
		{append(base, "--drop-in", writeDropInOnly(t, "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n")),
			`: runtime handler "runc" is a runtime the nodes already have: the drop-in would point containerd's "runc" handler at nvidia-container-runtime`, 1},
	} {
		before := tree(t, root)
		if c.code == 0 {
			c.code = 2
		}
		code, out, errs := run(c.args...)
		if errs = strings.ReplaceAll(errs, `\"`, `"`); code != c.code || out != "" || !strings.Contains(errs, c.want) { // exit 1 logs JSON
			t.Errorf("%v: exit %d, stdout %q, stderr %s; want exit %d with %s", c.args[2:], code, out, errs, c.code, c.want)
		}
		if after := tree(t, root); after != before {
			t.Errorf("%v changed the host root:\n%s\nwas\n%s", c.args[2:], after, before)
		}
	}
}

// tree lists every file under root with its bytes.
func tree(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		b.WriteString(p)
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b.WriteString(": " + string(data))
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// writeDropIn is the rendered drop-in of toolkitHost with extra appended.
func writeDropIn(t *testing.T, extra string) string {
	t.Helper()
	return writeDropInOnly(t, "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia]\n  runtime_type = \"io.containerd.runc.v2\"\n"+extra)
}

func writeDropInOnly(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "99-gpupolicy-nvidia.toml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Issue 13's node messages: a directory at --config-path, a file at --drop-in-dir, a BOM in
// config.toml, a flag of the other toolkit subcommand, a negative --watch.
func TestToolkitMessages(t *testing.T) {
	root, dropIn, proc := toolkitHost(t)
	cfg := filepath.Join(root, "etc/containerd/config.toml")
	base := []string{"toolkit", "install", "--host-root", root, "--drop-in", dropIn, "--containerd-version", "2.1", "--containerd-bin", "none", "--restart-mode", "none", "--proc", proc}
	for _, c := range []struct {
		name  string
		setup func()
		args  []string
		code  int
		want  string
	}{
		{"config.toml is a directory", func() { _ = os.MkdirAll(cfg, 0o755) }, base, 1,
			"host path /etc/containerd/config.toml is a directory, not a file: point the setting at the file itself, or move the directory away, and retry"},
		{"drop-in dir is a file", func() {
			_ = os.MkdirAll(filepath.Dir(cfg), 0o755)
			_ = os.WriteFile(filepath.Join(root, "etc/containerd/conf.d"), nil, 0o644)
		}, base, 1, "host path /etc/containerd/conf.d/99-gpupolicy-nvidia.toml under --host-root " + root + ": /etc/containerd/conf.d is a file where a directory must be: move that file away, or point the setting at a path whose directories are directories, and retry"},
		{"BOM in config.toml", func() {
			_ = os.MkdirAll(filepath.Dir(cfg), 0o755)
			_ = os.WriteFile(cfg, []byte("\xef\xbb\xbfversion = 3\n"), 0o644)
		}, base, 1,
			"/etc/containerd/config.toml starts with a UTF-8 byte order mark (bytes EF BB BF, an editor's doing), which TOML does not allow: save the file as UTF-8 without a BOM"},
		{"uninstall --containerd-version", nil, []string{"toolkit", "uninstall", "--containerd-version", "2.1"}, 2,
			"gpu-node-agent toolkit uninstall: --containerd-version is a flag of toolkit install, not of toolkit uninstall: drop it (gpu-node-agent toolkit uninstall --help lists its flags)\n"},
		{"unknown flag", nil, []string{"toolkit", "install", "--bogus"}, 2,
			"gpu-node-agent toolkit install: unknown flag --bogus (gpu-node-agent toolkit install --help lists its flags)\n"},
		{"negative --watch", nil, append(base, "--watch", "-1s"), 2,
			"gpu-node-agent toolkit install: --watch -1s is negative: give 0 (install once and exit) or the interval between re-applies, e.g. 1m"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_ = os.RemoveAll(filepath.Join(root, "etc"))
			if c.setup != nil {
				c.setup()
			}
			code, out, errs := run(c.args...)
			errs = strings.ReplaceAll(errs, `\"`, `"`)
			if code != c.code || out != "" || !strings.Contains(errs, c.want) {
				t.Fatalf("exit %d, stdout %q, stderr %s; want exit %d with %s", code, out, errs, c.code, c.want)
			}
			if c.code == 2 && strings.Contains(errs, "Usage:") {
				t.Fatalf("a bad flag prints the whole usage: %s", errs)
			}
		})
	}
}
