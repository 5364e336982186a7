package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/kubelettest"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCLIHelpDocumentsEveryFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"--help"}, &out, &errOut); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, flag := range []string{"-plugin-dir", "/var/lib/kubelet/device-plugins", "-config", "-host-root", "-nvml-mock", "dgxa100", "-probe-interval", "-node-name", "-log-format"} {
		if !strings.Contains(errOut.String(), flag) {
			t.Errorf("--help lacks %s:\n%s", flag, errOut.String())
		}
	}
}

func TestCLIErrors(t *testing.T) {
	dir := kubelettest.ShortDir(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		// This machine has no libnvidia-ml.so.1: the error says what to do.
		{[]string{"--plugin-dir", dir}, 1, "libnvidia-ml.so.1 not found"},
		{[]string{"--plugin-dir", dir, "--nvml-mock", "dgx-z"}, 1, "unknown --nvml-mock"},
		{[]string{"--plugin-dir", filepath.Join(dir, "missing"), "--nvml-mock", "dgxa100"}, 1, "mount the kubelet's device-plugins directory"},
		{[]string{"--config", writeConfig(t, "migStrategy: half\n"), "--nvml-mock", "dgxa100"}, 1, "field migStrategy"},
		{[]string{"--log-format", "xml"}, 2, "--log-format"},
		// 0s and -1s were accepted; 1ns probed every GPU in a busy loop.
		{[]string{"--probe-interval", "0s"}, 2, "gpu-device-plugin: --probe-interval 0s is out of range: use 1s to 1m0s (default 5s)"},
		{[]string{"--probe-interval", "-1s"}, 2, "--probe-interval -1s is out of range"},
		{[]string{"--probe-interval", "1ns"}, 2, "--probe-interval 1ns is out of range"},
		{[]string{"--probe-interval", "2m"}, 2, "--probe-interval 2m0s is out of range"},
		{[]string{"extra"}, 2, "unexpected arguments"},
		// A relative --plugin-dir made gRPC read "unix://plugins/kubelet.sock" as host "plugins"
		// and retry with an authority error; it is refused at start-up, as every path flag.
		{[]string{"--plugin-dir", "plugins", "--nvml-mock", "dgxa100"}, 2, `gpu-device-plugin: --plugin-dir "plugins" is a relative path: give an absolute path such as /var/lib/kubelet/device-plugins (the default)`},
		{[]string{"--plugin-dir", dir, "--host-root", "host", "--nvml-mock", "dgxa100"}, 2, `--host-root "host" is a relative path`},
	} {
		var out, errOut bytes.Buffer
		code := Main(context.Background(), tc.args, &out, &errOut)
		if code != tc.code || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %s; want exit %d with %q", tc.args, code, errOut.String(), tc.code, tc.want)
		}
	}
}

func TestCLIRunsUntilCancelled(t *testing.T) {
	dir := kubelettest.ShortDir(t)
	k := kubelettest.StartTest(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var errOut bytes.Buffer
	go func() {
		done <- Main(ctx, []string{"--plugin-dir", dir, "--nvml-mock", "dgxa100", "--node-name", "gpu-7"}, &bytes.Buffer{}, &errOut)
	}()
	select {
	case <-k.Registrations:
	case <-time.After(5 * time.Second):
		t.Fatal("no registration within 5s")
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(errOut.String()), "\n") {
		if !strings.Contains(line, `"node":"gpu-7"`) || !strings.Contains(line, `"stage":"device-plugin"`) {
			t.Errorf("log line without node and stage: %s", line)
		}
	}
}

func TestDRAHelpAndErrors(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"dra", "--help"}, &out, &errOut); code != 0 {
		t.Fatalf("dra --help exit %d", code)
	}
	for _, flag := range []string{"-plugins-dir", "/var/lib/kubelet/plugins", "-registry-dir", "/var/lib/kubelet/plugins_registry", "-cdi-dir", "/var/run/cdi", "-kubeconfig", "-node-name", "-nvml-mock", "gpu.nvidia.com", "parentUUID"} {
		if !strings.Contains(errOut.String(), flag) {
			t.Errorf("dra --help lacks %s:\n%s", flag, errOut.String())
		}
	}
	t.Setenv("NODE_NAME", "")
	t.Setenv("KUBECONFIG", "")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"dra"}, 2, "--node-name (or $NODE_NAME) is required"},
		{[]string{"dra", "--node-name", "n", "--cdi-dir", "cdi"}, 2, "cdi-dir"},
		{[]string{"dra", "--node-name", "n", "--kubeconfig", filepath.Join(t.TempDir(), "missing")}, 1, "load --kubeconfig"},
		{[]string{"dra", "--node-name", "n", "extra"}, 2, "unexpected arguments"},
		{[]string{"dra", "--node-name", "n", "--config", writeConfig(t, "resourceName: nvidia.com/gpu\nmigStrategy: none\ndeviceListStrategy: envvar\nsharing: {timeSlicing: {replicas: 1}}\nhealthChecks: {enabled: true, ignoredXIDs: []}\n")}, 1, "served by the device plugin"},
		{[]string{"--config", writeConfig(t, "allocation: dra\nresourceName: nvidia.com/gpu\nmigStrategy: none\ndeviceListStrategy: envvar\nsharing: {timeSlicing: {replicas: 1}}\nhealthChecks: {enabled: true, ignoredXIDs: []}\n")}, 1, "run gpu-device-plugin dra there"},
	} {
		var out, errOut bytes.Buffer
		code := Main(context.Background(), tc.args, &out, &errOut)
		if code != tc.code || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errOut.String(), tc.code, tc.want)
		}
	}
}
