package deviceplugin_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin"
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
	if code := deviceplugin.Main(context.Background(), []string{"--help"}, &out, &errOut); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, flag := range []string{"-plugin-dir", "/var/lib/kubelet/device-plugins", "-config", "-host-root", "-nvml-mock", "dgxa100", "-probe-interval", "-node-name", "-log-format"} {
		if !strings.Contains(errOut.String(), flag) {
			t.Errorf("--help lacks %s:\n%s", flag, errOut.String())
		}
	}
}

func TestCLIErrors(t *testing.T) {
	dir := shortDir(t)
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
		{[]string{"extra"}, 2, "unexpected arguments"},
	} {
		var out, errOut bytes.Buffer
		code := deviceplugin.Main(context.Background(), tc.args, &out, &errOut)
		if code != tc.code || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %s; want exit %d with %q", tc.args, code, errOut.String(), tc.code, tc.want)
		}
	}
}

func TestCLIRunsUntilCancelled(t *testing.T) {
	dir := shortDir(t)
	k := startKubelet(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var errOut bytes.Buffer
	go func() {
		done <- deviceplugin.Main(ctx, []string{"--plugin-dir", dir, "--nvml-mock", "dgxa100", "--node-name", "gpu-7"}, &bytes.Buffer{}, &errOut)
	}()
	waitRegistrations(t, k, 1, 5e9)
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
