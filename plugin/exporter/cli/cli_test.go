package cli

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestHelpDocumentsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	if code := Main(context.Background(), []string{"--help"}, &out, &out); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, f := range []string{"-listen", "-pod-resources-socket", "-interval", "-nvml-mock", "-pod-resources-refresh", "-hostname", "-log-level", ":9400", "dgxa100"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("--help does not mention %s:\n%s", f, out.String())
		}
	}
}

func TestBadFlagsNameTheFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--interval", "1ms"}, 2, "--interval 1ms is out of range: use 1s to 2m30s (default 15s): the bounds of spec.exporter.interval, which is also the scrape interval"},
		{[]string{"--interval", "24h"}, 2, "--interval 24h0m0s is out of range: use 1s to 2m30s"},
		{[]string{"--pod-resources-refresh", "0s"}, 2, "--pod-resources-refresh"},
		{[]string{"--log-level", "loud"}, 2, "--log-level"},
		{[]string{"extra"}, 2, "flags only"},
		{[]string{"--pod-resources-socket", "kubelet.sock"}, 2, `gpu-exporter: --pod-resources-socket "kubelet.sock" is a relative path: give an absolute path such as /var/lib/kubelet/pod-resources/kubelet.sock (the default)`},
		{[]string{"--nvml-mock", "dgx9", "--listen", "127.0.0.1:0"}, 1, `unknown --nvml-mock \"dgx9\"`},
	} {
		var out bytes.Buffer
		code := Main(context.Background(), c.args, &out, &out)
		if code != c.code || !strings.Contains(out.String(), c.want) {
			t.Errorf("%v: exit %d (want %d), output %q should contain %q", c.args, code, c.code, out.String(), c.want)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitReady(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("exporter on %s not ready within 30s (last error %v)", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

func TestRunServesUntilCancelled(t *testing.T) {
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var logs syncBuffer
	var code int
	var wg sync.WaitGroup
	wg.Go(func() {
		code = Main(ctx, []string{"--nvml-mock", "dgxa100", "--listen", addr, "--interval", "1s",
			"--hostname", "node-x", "--pod-resources-socket", filepath.Join(t.TempDir(), "none.sock")}, io.Discard, &logs)
	})
	waitReady(t, addr)
	body := get(t, "http://"+addr+"/metrics")
	for _, want := range []string{`gpupolicy_gpu_up{DCGM_FI_DRIVER_VERSION="550.54.15",Hostname="node-x"`, "DCGM_FI_DEV_GPU_TEMP{", "gpupolicy_exporter_pod_resources_requests_total{result=\"error\"}"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if get(t, "http://"+addr+"/healthz") != "ok\n" {
		t.Error("/healthz")
	}
	cancel()
	wg.Wait()
	if code != 0 {
		t.Errorf("exit %d after cancel; logs:\n%s", code, logs.String())
	}
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		if !strings.Contains(line, `"node":"node-x"`) || !strings.Contains(line, `"stage":`) {
			t.Errorf("log line without node and stage: %s", line)
		}
	}
}

// TestBinaryResidentMemory builds bin/gpu-exporter, runs it on the dgxa100 mock, scrapes it
// and reads its VmRSS (target < 30 MiB).
func TestBinaryResidentMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := filepath.Join(t.TempDir(), "gpu-exporter")
	build := exec.Command("go", "build", "-o", bin, "github.com/gpupolicy/gpupolicy/plugin/cmd/gpu-exporter")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	addr := freeAddr(t)
	cmd := exec.Command(bin, "--nvml-mock", "dgxa100", "--listen", addr, "--interval", "1s",
		"--pod-resources-socket", filepath.Join(t.TempDir(), "none.sock"))
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	waitReady(t, addr)
	for range 200 {
		get(t, "http://"+addr+"/metrics")
	}
	time.Sleep(time.Second) // several collections
	rss, err := vmRSS(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gpu-exporter --nvml-mock dgxa100: VmRSS %.1f MiB after 200 scrapes", float64(rss)/(1<<20))
	if rss > 30<<20 {
		t.Errorf("VmRSS %.1f MiB, target < 30 MiB", float64(rss)/(1<<20))
	}
}

func vmRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
