package metrics_test

import (
	"bytes"
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/exporter/podresources/podresourcestest"
)

// dcgmCompatLint are the promtool lint findings that keeping dcgm-exporter's names forces on
// us (its counters lack _total, its label modelName is camelCase); any other finding fails.
var dcgmCompatLint = []*regexp.Regexp{
	regexp.MustCompile(`^DCGM_FI_\w+ counter metrics should have "_total" suffix$`),
	regexp.MustCompile(`^DCGM_FI_DEV_PCIE_REPLAY_COUNTER metric name should not include type 'counter'$`),
	regexp.MustCompile(`^(DCGM_FI_\w+|gpupolicy_gpu_\w+) label names should be written in 'snake_case' not 'camelCase'$`),
}

// TestPromtoolCheckMetrics runs `promtool check metrics` (Debian package prometheus) on a scrape
// that has every kind of series: MIG, shared GPUs with pods, an XID, a lost GPU.
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (apt-get install prometheus); CI installs it")
	}
	srv := podresourcestest.Start(t)
	r := newRig(t, "dgxa100", srv.Socket)
	if err := r.mock.ConfigureMIG(4, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_3_SLICE); err != nil {
		t.Fatal(err)
	}
	migs := migUUIDs(t, r.mock, 4)
	srv.SetPods(
		podresourcestest.Pod{Namespace: "a", Name: "p0", Containers: []podresourcestest.Container{{Name: "c", Resource: "nvidia.com/gpu", DeviceIDs: []string{uuidOf(t, r.mock, 0) + "::0"}}}},
		podresourcestest.Pod{Namespace: "a", Name: "p1", Containers: []podresourcestest.Container{{Name: "c", Resource: "nvidia.com/gpu", DeviceIDs: []string{uuidOf(t, r.mock, 0) + "::1"}}}},
		podresourcestest.Pod{Namespace: "b", Name: "m", Containers: []podresourcestest.Container{{Name: "c", Resource: "nvidia.com/mig-3g.20gb", DeviceIDs: []string{migs[1]}}}},
	)
	r.refresh()
	if err := r.mock.SetLost(6, true); err != nil {
		t.Fatal(err)
	}
	r.refresh()
	text := r.scrapeText(t)

	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return
	case errors.As(err, &exit) && exit.ExitCode() == 3: // lint findings only; the text parsed
	default:
		t.Fatalf("promtool check metrics: %v\n%s", err, out.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		allowed := false
		for _, re := range dcgmCompatLint {
			allowed = allowed || re.MatchString(line)
		}
		if !allowed {
			t.Errorf("promtool: %s", line)
		}
	}
}
