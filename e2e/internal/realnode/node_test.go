package realnode

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpupolicy/gpupolicy/e2e/internal/cluster"
)

// A node without an API server (the kubelet keeps retrying): the node's own containerd config
// is the one containerd runs, the supervisor starts containerd again after SIGTERM with a new
// PID, and Stop leaves no process, mount point, bridge, DNAT rule or /etc/hosts line behind.
// The suite in e2e/realnode covers the rest with a control plane.
func TestNodeLeavesNothingBehind(t *testing.T) {
	if os.Geteuid() != 0 {
		skipOrFail(t, "needs root (mount and PID namespaces, a bridge, iptables)")
	}
	dir, err := cluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kubelet := filepath.Join(dir, "kubelet")
	if _, err := os.Stat(kubelet); err != nil {
		skipOrFail(t, "no kubelet in "+dir+" (e2e/hack/build-binaries.sh builds it)")
	}
	work := t.TempDir()
	kc := filepath.Join(work, "kubeconfig")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: x, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: x, user: {token: x}}]\ncontexts: [{name: x, context: {cluster: x, user: x}}]\ncurrent-context: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hadKubelet := exists("/var/lib/kubelet")
	n, err := Start(context.Background(), Options{
		Name: "harness-probe", Containerd: "1.6", Kubelet: kubelet, Kubeconfig: kc,
		APIServer: "https://127.0.0.1:1", Dir: filepath.Join(work, "node"), Bridge: "gpue2eprobe0",
		DriverVersion: "550.54.15",
	})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = n.Stop()
		}
	})

	dump, err := n.ConfigDump(context.Background())
	if err != nil || !strings.Contains(dump, `[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.`+DebugRuntime+`]`) || !strings.Contains(dump, `sandbox_image = "`+PauseImage+`"`) {
		t.Fatalf("config dump in the node does not show the node's own config (%v):\n%s", err, dump)
	}
	if b, err := os.ReadFile(n.HostPath("/proc/driver/nvidia/version")); err != nil || !strings.Contains(string(b), "550.54.15") {
		t.Fatalf("driver version file: %q %v", b, err)
	}
	out, err := n.Exec(context.Background(), "cat", "/proc/driver/nvidia/version")
	if err != nil || !strings.Contains(string(out), "Kernel Module  550.54.15") {
		t.Fatalf("the node's /proc/driver/nvidia/version: %q %v", out, err)
	}
	before, err := n.PIDOf("containerd")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Restart(context.Background(), "containerd"); err != nil {
		t.Fatal(err)
	}
	starts, _ := n.Starts("containerd")
	if len(starts) != 2 || starts[1].PID == before {
		t.Fatalf("containerd starts after SIGTERM: %+v (was pid %d)", starts, before)
	}
	if err := n.Signal("containerd", syscall.Signal(0)); err != nil {
		t.Fatalf("containerd not running after its restart: %v", err)
	}

	stopped = true
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	if left := n.nsProcesses(); len(left) > 0 {
		t.Errorf("processes left: %v", left)
	}
	if !hadKubelet && exists("/var/lib/kubelet") {
		t.Error("/var/lib/kubelet (a mount point the node created) is still on the host")
	}
	if exec.Command("ip", "link", "show", "gpue2eprobe0").Run() == nil {
		t.Error("bridge gpue2eprobe0 left")
	}
	if nat, _ := exec.Command("iptables", "-t", "nat", "-S").Output(); strings.Contains(string(nat), "gpupolicy-e2e harness-probe") {
		t.Error("DNAT rule left")
	}
	if left, _ := filepath.Glob("/sys/fs/cgroup/*/gpupolicy-e2e-harness-probe"); len(left) > 0 {
		t.Errorf("cgroups left: %v", left)
	}
	if hosts, _ := os.ReadFile("/etc/hosts"); strings.Contains(string(hosts), "harness-probe") {
		t.Error("/etc/hosts line left")
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// skipOrFail skips on a machine without what the test needs, but fails under CI, where a skip
// would hide that the harness was never exercised.
func skipOrFail(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(why)
	}
	t.Skip(why)
}
