package toolkit

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpupolicy/gpupolicy/internal/peer"
	"github.com/gpupolicy/gpupolicy/plugin/nodefacts/hostfacts"
)

// The toolkit stage against a real, supervised containerd of each supported major, in a
// private mount and PID namespace (restart-mode signal SIGTERMs only the test's daemon; the
// daemon serves DefaultContainerdSocket as on a node).
func TestCRIVerifyContainerd16(t *testing.T) {
	testCRIVerify(t, "/usr/bin/containerd", "1.6", "node-v2.toml", "dropin-v2.toml")
}

func TestCRIVerifyContainerd21(t *testing.T) {
	testCRIVerify(t, peer.Containerd2(t), "2.1", "node-v3.toml", "dropin-v3.toml")
}

const renderedRuntime = "/usr/local/nvidia/toolkit/nvidia-container-runtime"

func testCRIVerify(t *testing.T, bin, version, node, dropIn string) {
	if !runInNamespaces(t, "--pid", "--fork", "--mount-proc") {
		return
	}
	ctx := context.Background()
	copyFile(t, testdata(t, node), DefaultConfigPath)
	installRuntime(t, renderedRuntime)
	installRuntime(t, "/opt/nvidia/runtime-v2")
	d := startDaemon(t, bin)
	original := testdata(t, dropIn)
	in := &Installer{HostRoot: "/", DropInSource: original, ContainerdVersion: version, ContainerdBinary: bin,
		RestartMode: RestartNone, ProcDir: "/proc", RestartTimeout: 20 * time.Second}
	install := func(step string) Result {
		t.Helper()
		res, err := in.Install(ctx)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return res
	}

	// Restart-mode none: written, but the running daemon has the config from before (no
	// handler), so not verified, and the gate says to restart containerd.
	res := install("restart-mode none")
	if !res.Changed || res.Restarted || res.Verified || !contains(res.Reason, "older than") || !contains(res.Reason, "restart containerd") {
		t.Fatalf("restart-mode none: %+v", res)
	}
	assertRecorded(t, original, res.Reason)

	// A person restarts containerd: the next install verifies through the CRI.
	d.restart()
	res = install("after a manual restart")
	if res.Changed || res.Restarted || !res.Verified {
		t.Fatalf("after a manual restart: %+v", res)
	}
	wantBy := "CRI RuntimeService.Status (handler settings from info.config) of containerd "
	if version == "2.1" {
		wantBy = "CRI RuntimeService.Status (runtime_handlers; handler settings from info.config) of containerd v2.1.9 "
	}
	if by := res.Status.VerifiedBy; !strings.HasPrefix(by, wantBy) || !strings.HasSuffix(by, " at "+DefaultContainerdSocket) {
		t.Fatalf("verifiedBy %q", by)
	}
	if ready, reason := GateCheck("/", sha(must(os.ReadFile(original)))); !ready {
		t.Fatalf("gate closed after a verified install: %s", reason)
	}
	assertNodeSettingsCRI(t, version, renderedRuntime)

	// The handler's binary gone from the node (a toolkit uninstalled by hand): containerd
	// still lists the handler, but pods of the RuntimeClass could not start, so not verified.
	if err := os.Remove(renderedRuntime); err != nil {
		t.Fatal(err)
	}
	res = install("binary missing")
	if res.Verified || !contains(res.Reason, "BinaryName "+renderedRuntime+" is not on the node") {
		t.Fatalf("binary missing: %+v", res)
	}
	installRuntime(t, renderedRuntime)
	if res = install("binary back"); !res.Verified {
		t.Fatalf("binary back: %+v", res)
	}

	// A policy change with restart-mode signal: the daemon is SIGTERMed, its supervisor starts
	// it again, and the new process runs the new BinaryName, the handler as the default runtime
	// and (2.1) CDI, all compared with the daemon's own config.
	changed := changedDropIn(t, original, version, "/opt/nvidia/runtime-v2")
	in.DropInSource, in.RestartMode = changed, RestartSignal
	before := d.pid()
	res = install("policy change, restart-mode signal")
	if !res.Changed || !res.Restarted || !res.Verified || d.pid() == before {
		t.Fatalf("policy change, restart-mode signal (pid %d, was %d): %+v", d.pid(), before, res)
	}
	assertNodeSettingsCRI(t, version, "/opt/nvidia/runtime-v2")
	if view := must(queryCRI(ctx, DefaultContainerdSocket, DefaultContainerdSocket)); digJSON(view.Config, "containerd", "defaultRuntimeName") != "nvidia" {
		t.Fatalf("CRI: default runtime %v", digJSON(view.Config, "containerd", "defaultRuntimeName"))
	}
	before = d.pid()
	if res = install("steady state"); res.Changed || res.Restarted || !res.Verified || d.pid() != before {
		t.Fatalf("steady state restarted or changed: %+v", res)
	}

	// A restart whose old process keeps answering (here the SIGTERM reaches a stand-in, as if
	// containerd were slow to stop) is not a restart: new bytes with the same handler settings
	// are verified only by a process other than the one that answered before.
	in.DropInSource, in.ProcDir, in.RestartTimeout = withComment(t, changed), standInProc(t), time.Second
	res = install("old process still answers")
	if !res.Restarted || res.Verified || !contains(res.Reason, fmt.Sprintf("containerd pid %d from before the restart still answers", before)) {
		t.Fatalf("old process still answers: %+v", res)
	}
	in.ProcDir, in.RestartTimeout = "/proc", 20*time.Second

	// Old bytes: the drop-in changes back, nobody restarts. The daemon has handler "nvidia",
	// but with the other BinaryName: not loaded.
	in.DropInSource, in.RestartMode = original, RestartNone
	res = install("old bytes running")
	if !res.Changed || res.Verified || !contains(res.Reason, `options.BinaryName = "/opt/nvidia/runtime-v2", the drop-in sets "`+renderedRuntime+`"`) {
		t.Fatalf("old bytes running: %+v", res)
	}
	assertRecorded(t, original, res.Reason)

	// An unreachable socket is named, with the flag to fix it.
	other := *in
	other.ContainerdSocket = "/run/containerd/other.sock"
	if res, err := other.Install(ctx); err != nil || res.Verified ||
		!contains(res.Reason, "cannot reach containerd's CRI at /run/containerd/other.sock: no such socket") || !contains(res.Reason, "--containerd-socket") {
		t.Fatalf("unreachable socket: %+v %v", res, err)
	}

	// A candidate containerd refuses: nothing written, containerd untouched (same process,
	// same effective config, still the previous handler settings), the reason recorded.
	d.restart()
	if res = install("loaded before the refusal"); !res.Verified {
		t.Fatalf("before the refusal: %+v", res)
	}
	bad := filepath.Join(t.TempDir(), "bad.toml")
	plugin := `plugins."io.containerd.grpc.v1.cri"`
	if version == "2.1" {
		plugin = `plugins."io.containerd.cri.v1.runtime"`
	}
	// A TOML value of the wrong type: containerd cannot decode it into its config.
	writeFile(t, bad, strings.Replace(string(must(os.ReadFile(original))), `runtime_type = "io.containerd.runc.v2"`, "runtime_type = 5", 1))
	pid, dumpBefore := d.pid(), effective(t, bin)
	filesBefore := snapshot(t, "/etc/containerd")
	in.DropInSource = bad
	_, err := in.Install(ctx)
	if err == nil || !contains(err.Error(), "containerd refused the drop-in") || !contains(err.Error(), "containerd keeps running its previous configuration") {
		t.Fatalf("refused candidate: %v", err)
	}
	if d.pid() != pid {
		t.Fatalf("containerd restarted after a refused candidate: pid %d, was %d", d.pid(), pid)
	}
	if after := effective(t, bin); after != dumpBefore {
		t.Fatalf("containerd's effective config changed after a refused candidate:\n%s\nwas:\n%s", after, dumpBefore)
	}
	assertSame(t, filesBefore, snapshot(t, "/etc/containerd"))
	assertNodeSettingsCRI(t, version, renderedRuntime)
	assertRecorded(t, bad, err.Error())

	// A node file imported after the drop-in takes the handler away (1.6 replaces the whole CRI
	// table) or overrides its BinaryName (2.1 merges): the restarted daemon does not run the
	// drop-in, and the next run does not restart it again for the same bytes.
	site := "version = 2\n[" + plugin + ".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n"
	wantStale := `the running containerd has no runtime handler "nvidia"`
	if version == "2.1" {
		site = "version = 3\n[" + plugin + ".containerd.runtimes.nvidia.options]\n  BinaryName = \"/usr/bin/site-runtime\"\n"
		wantStale = `the running containerd has ` + plugin + `.containerd.runtimes.nvidia.options.BinaryName = "/usr/bin/site-runtime"`
	}
	writeFile(t, "/etc/containerd/conf.d/zz-site.toml", site)
	in.DropInSource, in.RestartMode = changed, RestartSignal
	res = install("overridden after restart")
	if !res.Restarted || res.Verified || !contains(res.Reason, "restarted without the drop-in's settings in effect: "+wantStale) {
		t.Fatalf("overridden after restart: %+v", res)
	}
	assertRecorded(t, changed, res.Reason)
	pid = d.pid()
	if res = install("overridden, same bytes"); res.Restarted || res.Verified || d.pid() != pid || !contains(res.Reason, "not restarted again") {
		t.Fatalf("overridden, same bytes: %+v", res)
	}
	if err := os.Remove("/etc/containerd/conf.d/zz-site.toml"); err != nil {
		t.Fatal(err)
	}

	// Containerd that does not come back: the restart times out.
	d.noRestart()
	in.DropInSource, in.RestartTimeout = original, time.Second
	res = install("no supervisor")
	if !res.Restarted || res.Verified || !contains(res.Reason, "restart timed out: containerd did not answer on its CRI with a new process within 1s") {
		t.Fatalf("no supervisor: %+v", res)
	}
	assertRecorded(t, original, res.Reason)
}

// assertRecorded checks the status file records reason for the drop-in at source, and the
// gate shows it as its Reason.
func assertRecorded(t *testing.T, source, reason string) {
	t.Helper()
	st, err := hostfacts.ReadToolkitStatus("/")
	if err != nil || st.Verified || st.Reason != reason || len(st.Handlers) != 0 || st.DropInSHA256 != sha(must(os.ReadFile(source))) {
		t.Fatalf("status %+v (%v), want not verified with %q", st, err, reason)
	}
	if ready, got := GateCheck("/", st.DropInSHA256); ready || got != "toolkit install failed: "+reason {
		t.Fatalf("gate: ready %v, reason %q", ready, got)
	}
}

// assertNodeSettingsCRI checks, through the running daemon's CRI, the handler's BinaryName
// and that the node's own settings are in effect beside it: its other runtimes and, where
// the CRI config holds them (1.x; 2.x keeps them in the images plugin), the sandbox image and
// the registry config_path.
func assertNodeSettingsCRI(t *testing.T, version, binaryName string) {
	t.Helper()
	view, err := queryCRI(context.Background(), DefaultContainerdSocket, DefaultContainerdSocket)
	if err != nil {
		t.Fatal(err)
	}
	if got := digJSON(view.Runtimes["nvidia"], "options", "BinaryName"); got != binaryName {
		t.Fatalf("CRI: nvidia BinaryName %v, want %s", got, binaryName)
	}
	if digJSON(view.Runtimes["runc"], "options", "SystemdCgroup") != true || digJSON(view.Runtimes["kata"], "runtimeType") != "io.containerd.kata.v2" {
		t.Fatalf("CRI: the node's runtimes lost: %v", view.Runtimes)
	}
	if version == "1.6" && (view.Config["sandboxImage"] != "registry.example/pause:3.9" || digJSON(view.Config, "registry", "configPath") != "/etc/containerd/certs.d") {
		t.Fatalf("CRI: the node's sandbox image or registry config_path lost: %v %v", view.Config["sandboxImage"], view.Config["registry"])
	}
}

func digJSON(m map[string]any, keys ...string) any {
	var cur any = m
	for _, k := range keys {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}

// changedDropIn writes a copy of the drop-in at src with another BinaryName, the handler as
// the default runtime (spec.toolkit.setAsDefault) and, on 2.x, CDI (spec.toolkit.cdi), as the
// function renders them.
func changedDropIn(t *testing.T, src, version, binaryName string) string {
	t.Helper()
	plugin := `plugins."io.containerd.grpc.v1.cri"`
	extra := ""
	if version != "1.6" {
		plugin = `plugins."io.containerd.cri.v1.runtime"`
		extra = "\n[" + plugin + "]\n  enable_cdi = true\n  cdi_spec_dirs = [\"/etc/cdi\", \"/var/run/cdi\"]\n"
	}
	extra += "\n[" + plugin + ".containerd]\n  default_runtime_name = \"nvidia\"\n"
	p := filepath.Join(t.TempDir(), filepath.Base(src))
	writeFile(t, p, strings.Replace(string(must(os.ReadFile(src))), renderedRuntime, binaryName, 1)+extra)
	return p
}

// effective is `containerd config dump` of the node's config, its imports sorted (1.6 lists
// them in map order).
func effective(t *testing.T, bin string) string {
	t.Helper()
	d := must(parseTOML("dump", must(Host{Root: "/"}.dump(context.Background(), bin, DefaultConfigPath))))
	if imports, ok := d["imports"].([]any); ok {
		slices.SortFunc(imports, func(a, b any) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	}
	return string(must(json.Marshal(d)))
}

// withComment writes a copy of the drop-in at src with other bytes, the same settings.
func withComment(t *testing.T, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), filepath.Base(src))
	writeFile(t, p, string(must(os.ReadFile(src)))+"# same settings, other bytes\n")
	return p
}

// standInProc is a /proc whose only "containerd" is a sleep process: restart-mode signal
// SIGTERMs it, and the real daemon keeps running.
func standInProc(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	dir := t.TempDir()
	pid := strconv.Itoa(cmd.Process.Pid)
	writeFile(t, filepath.Join(dir, pid, "stat"), pid+" (containerd) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0\n")
	return dir
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// installRuntime puts an executable at path (under the namespace's temp mounts), as the
// toolkit-copy init container installs nvidia-container-runtime.
func installRuntime(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\nexec runc \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}
