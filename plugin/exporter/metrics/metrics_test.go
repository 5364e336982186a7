package metrics_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/exporter/metrics"
	"github.com/gpupolicy/gpupolicy/plugin/exporter/podresources/podresourcestest"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

// dcgmOnA100 is every dcgm-exporter metric NVML answers on an A100 (no GPM there).
var dcgmOnA100 = []string{
	"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL",
	"DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED",
	"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
	"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_XID_ERRORS",
	"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
	"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
	"DCGM_FI_DEV_ROW_REMAP_PENDING", "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
	"DCGM_FI_DEV_POWER_VIOLATION", "DCGM_FI_DEV_THERMAL_VIOLATION", "DCGM_FI_DEV_SYNC_BOOST_VIOLATION",
	"DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", "DCGM_FI_DEV_LOW_UTIL_VIOLATION", "DCGM_FI_DEV_RELIABILITY_VIOLATION",
}

func TestEveryMetricWithLabelsOnDGXA100(t *testing.T) {
	r := newRig(t, "dgxa100", "")
	r.refresh()
	fams := r.scrape(t)
	for _, name := range append(dcgmOnA100, "gpupolicy_gpu_up") {
		if got := len(fams[name].GetMetric()); got != 8 {
			t.Errorf("%s: %d series, want 8 (one per GPU)", name, got)
			continue
		}
		for i := range 8 {
			d, _ := r.mock.DeviceGetHandleByIndex(i)
			pci, _ := d.GetPciInfo()
			want := map[string]string{
				"gpu": itoa(i), "UUID": uuidOf(t, r.mock, i), "device": "nvidia" + itoa(i),
				"pci_bus_id": busID(pci.BusId), "modelName": "NVIDIA A100-SXM4-40GB",
				"Hostname": "node-a", "DCGM_FI_DRIVER_VERSION": "550.54.15",
			}
			if len(series(fams, name, want)) != 1 {
				t.Errorf("%s: no series with labels %v", name, want)
			}
		}
		if strings.HasPrefix(name, "DCGM_") {
			for _, m := range fams[name].GetMetric() {
				l := labels(m)
				for _, k := range []string{"GPU_I_PROFILE", "GPU_I_ID", "pod", "namespace", "container"} {
					if v, ok := l[k]; ok && v != "" {
						t.Errorf("%s{gpu=%s}: %s=%q on a whole GPU without pods", name, l["gpu"], k, v)
					}
				}
			}
		}
	}
	for name := range fams {
		if strings.HasPrefix(name, "DCGM_FI_PROF_") {
			t.Errorf("%s reported on an A100, which has no GPM", name)
		}
	}
	checks := []struct {
		name string
		gpu  int
		want float64
	}{
		{"DCGM_FI_DEV_FB_USED", 3, float64(gpumock.UsedMiB(3))},
		{"DCGM_FI_DEV_FB_RESERVED", 3, gpumock.ReservedMiB},
		{"DCGM_FI_DEV_FB_FREE", 3, 40960 - float64(gpumock.UsedMiB(3)) - gpumock.ReservedMiB},
		{"DCGM_FI_DEV_POWER_USAGE", 2, 70},
		{"DCGM_FI_DEV_GPU_TEMP", 5, 35},
		{"DCGM_FI_DEV_MEMORY_TEMP", 5, 40},
		{"DCGM_FI_DEV_GPU_UTIL", 1, 20},
		{"DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", 4, 14},
		{"DCGM_FI_DEV_POWER_VIOLATION", 2, 2000}, // 2 ms in ns from NVML -> us
		{"gpupolicy_gpu_up", 7, 1},
	}
	for _, c := range checks {
		s := series(fams, c.name, map[string]string{"gpu": itoa(c.gpu)})
		if len(s) != 1 || value(s[0]) != c.want {
			t.Errorf("%s{gpu=%d}: got %v, want %v", c.name, c.gpu, s, c.want)
		}
	}
	if s := series(fams, "gpupolicy_node_driver_info", map[string]string{"DCGM_FI_DRIVER_VERSION": "550.54.15", "cuda_driver_version": "12.4"}); len(s) != 1 {
		t.Errorf("gpupolicy_node_driver_info: %v", fams["gpupolicy_node_driver_info"])
	}
	for _, name := range []string{"gpupolicy_exporter_collection_duration_seconds", "gpupolicy_exporter_collections_total",
		"gpupolicy_exporter_last_collection_timestamp_seconds", "process_resident_memory_bytes"} {
		if len(fams[name].GetMetric()) != 1 {
			t.Errorf("self metric %s missing", name)
		}
	}
}

func TestLostGPUShowsUpZeroWhileOthersReport(t *testing.T) {
	r := newRig(t, "dgxa100", "")
	r.refresh()
	if err := r.mock.SetLost(3, true); err != nil {
		t.Fatal(err)
	}
	r.refresh()
	fams := r.scrape(t)
	for i := range 8 {
		want := 1.0
		if i == 3 {
			want = 0
		}
		s := series(fams, "gpupolicy_gpu_up", map[string]string{"gpu": itoa(i), "UUID": uuidOf(t, r.mock, i)})
		if len(s) != 1 || value(s[0]) != want {
			t.Errorf("gpupolicy_gpu_up{gpu=%d}: %v, want %v", i, s, want)
		}
		temp := series(fams, "DCGM_FI_DEV_GPU_TEMP", map[string]string{"gpu": itoa(i)})
		if (i == 3) != (len(temp) == 0) {
			t.Errorf("DCGM_FI_DEV_GPU_TEMP{gpu=%d}: %d series (lost GPU: none, others: one)", i, len(temp))
		}
	}
	le := series(fams, "gpupolicy_gpu_last_error_timestamp_seconds", map[string]string{"gpu": "3", "error": "ERROR_GPU_IS_LOST"})
	if len(le) != 1 || value(le[0]) <= 0 {
		t.Errorf("gpupolicy_gpu_last_error_timestamp_seconds{gpu=3}: %v", fams["gpupolicy_gpu_last_error_timestamp_seconds"])
	}
	if s := series(fams, "gpupolicy_exporter_nvml_errors_total", map[string]string{"error": "ERROR_GPU_IS_LOST"}); len(s) == 0 {
		t.Error("gpupolicy_exporter_nvml_errors_total has no ERROR_GPU_IS_LOST")
	}
	// The GPU comes back (e.g. after a reset): it reports again.
	if err := r.mock.SetLost(3, false); err != nil {
		t.Fatal(err)
	}
	r.refresh()
	fams = r.scrape(t)
	if s := series(fams, "gpupolicy_gpu_up", map[string]string{"gpu": "3"}); len(s) != 1 || value(s[0]) != 1 {
		t.Errorf("gpupolicy_gpu_up{gpu=3} after recovery: %v", s)
	}
}

func TestPodLabelsAttachToTheRightDevice(t *testing.T) {
	srv := podresourcestest.Start(t)
	r := newRig(t, "dgxa100", srv.Socket)
	if err := r.mock.ConfigureMIG(1, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_2_SLICE); err != nil {
		t.Fatal(err)
	}
	migs := migUUIDs(t, r.mock, 1)
	if len(migs) != 2 {
		t.Fatalf("mock GPU 1 has %d MIG devices, want 2", len(migs))
	}
	gpu := func(i int) string { return uuidOf(t, r.mock, i) }
	ctr := func(name, res string, ids ...string) []podresourcestest.Container {
		return []podresourcestest.Container{{Name: name, Resource: res, DeviceIDs: ids}}
	}
	srv.SetPods(
		podresourcestest.Pod{Namespace: "ml", Name: "train", Containers: ctr("main", "nvidia.com/gpu", gpu(0))},
		podresourcestest.Pod{Namespace: "web", Name: "a", Containers: ctr("srv", "nvidia.com/gpu", gpu(2)+"::0")},
		podresourcestest.Pod{Namespace: "web", Name: "b", Containers: ctr("srv", "nvidia.com/gpu", gpu(2)+"::3")},
		podresourcestest.Pod{Namespace: "ml", Name: "small", Containers: ctr("c", "nvidia.com/mig-2g.10gb", migs[1])},
	)
	r.refresh()
	fams := r.scrape(t)

	if s := series(fams, "DCGM_FI_DEV_GPU_TEMP", map[string]string{"gpu": "0"}); len(s) != 1 || labels(s[0])["pod"] != "train" ||
		labels(s[0])["namespace"] != "ml" || labels(s[0])["container"] != "main" {
		t.Errorf("whole GPU 0: %v", s)
	}
	shared := series(fams, "DCGM_FI_DEV_GPU_TEMP", map[string]string{"gpu": "2"})
	if len(shared) != 2 || labels(shared[0])["pod"] != "a" || labels(shared[1])["pod"] != "b" {
		t.Errorf("time-sliced GPU 2: want one series per pod (a, b), got %v", shared)
	}
	if s := series(fams, "DCGM_FI_DEV_GPU_TEMP", map[string]string{"gpu": "5"}); len(s) != 1 || labels(s[0])["pod"] != "" {
		t.Errorf("idle GPU 5: %v", s)
	}
	mig := series(fams, "DCGM_FI_DEV_FB_USED", map[string]string{"gpu": "1", "GPU_I_PROFILE": "2g.10gb"})
	if len(mig) != 1 || labels(mig[0])["pod"] != "small" || labels(mig[0])["GPU_I_ID"] == "" {
		t.Errorf("MIG 2g.10gb on GPU 1: %v", mig)
	}
	free := series(fams, "DCGM_FI_DEV_FB_USED", map[string]string{"gpu": "1", "GPU_I_PROFILE": "1g.5gb"})
	if len(free) != 1 || labels(free[0])["pod"] != "" {
		t.Errorf("unused MIG 1g.5gb on GPU 1: %v", free)
	}
	if s := series(fams, "DCGM_FI_DEV_GPU_UTIL", map[string]string{"gpu": "1"}); len(s) != 0 {
		t.Errorf("GPU utilisation reported on a MIG-enabled GPU (NVML does not support it): %v", s)
	}

	before := srv.Calls()
	for range 20 {
		r.scrape(t)
	}
	if got := srv.Calls() - before; got != 0 {
		t.Errorf("20 scrapes made %d pod-resources List calls, want 0", got)
	}
}

func TestBrokenSocketDegradesToNoPodLabels(t *testing.T) {
	r := newRig(t, "dgxa100", filepath.Join(t.TempDir(), "kubelet.sock"))
	r.refresh()
	fams := r.scrape(t)
	if got := len(fams["DCGM_FI_DEV_GPU_TEMP"].GetMetric()); got != 8 {
		t.Fatalf("DCGM_FI_DEV_GPU_TEMP: %d series, want 8", got)
	}
	for _, m := range fams["DCGM_FI_DEV_GPU_TEMP"].GetMetric() {
		if labels(m)["pod"] != "" {
			t.Errorf("pod label without a kubelet: %v", labels(m))
		}
	}
	if s := series(fams, "gpupolicy_exporter_pod_resources_requests_total", map[string]string{"result": "error"}); len(s) != 1 || value(s[0]) != 1 {
		t.Errorf("pod_resources_requests_total{result=error}: %v", s)
	}
}

func busID(b [32]int8) string {
	raw := make([]byte, len(b))
	for i, c := range b {
		raw[i] = byte(c)
	}
	return strings.TrimRight(string(raw), "\x00")
}

func TestBackgroundRenderingFollowsSnapshots(t *testing.T) {
	r := newRig(t, "dgxa100", "")
	g := metrics.NewGatherer(metrics.Sources{Snapshot: r.col.Snapshot}, nil)
	r.handler = g.Handler()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { g.Run(ctx, 10*time.Millisecond, discardLogger()) })
	defer func() { cancel(); wg.Wait() }()
	r.refresh()
	if err := r.mock.SetLost(5, true); err != nil {
		t.Fatal(err)
	}
	r.refresh()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := series(r.scrape(t), "gpupolicy_gpu_up", map[string]string{"gpu": "5"})
		if len(s) == 1 && value(s[0]) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("background rendering never showed the lost GPU: %v", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPodLabelsFromDRAClaims: devices a pod holds through ResourceClaims of driver
// gpu.nvidia.com (pod-resources DynamicResources) carry its labels: a whole GPU by its device
// name gpu-<index>, a MIG device by gpu-<index>-mig-<gi>-<ci>.
func TestPodLabelsFromDRAClaims(t *testing.T) {
	srv := podresourcestest.Start(t)
	r := newRig(t, "dgxa100", srv.Socket)
	if err := r.mock.ConfigureMIG(1, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_2_SLICE); err != nil {
		t.Fatal(err)
	}
	r.refresh()
	mig := series(r.scrape(t), "DCGM_FI_DEV_FB_USED", map[string]string{"gpu": "1", "GPU_I_PROFILE": "2g.10gb"})
	if len(mig) != 1 {
		t.Fatalf("MIG 2g.10gb on GPU 1: %v", mig)
	}
	gi := labels(mig[0])["GPU_I_ID"]
	claim := func(device string) []podresourcestest.Container {
		return []podresourcestest.Container{{Name: "c", Claims: []podresourcestest.ClaimDevice{{Namespace: "ml", Claim: "x", Driver: "gpu.nvidia.com", Pool: "node", Device: device}}}}
	}
	srv.SetPods(
		podresourcestest.Pod{Namespace: "ml", Name: "whole", Containers: claim("gpu-3")},
		podresourcestest.Pod{Namespace: "ml", Name: "slice", Containers: claim("gpu-1-mig-" + gi + "-0")},
	)
	r.refresh()
	fams := r.scrape(t)
	if s := series(fams, "DCGM_FI_DEV_GPU_TEMP", map[string]string{"gpu": "3"}); len(s) != 1 || labels(s[0])["pod"] != "whole" {
		t.Errorf("GPU 3 held through a claim: %v", s)
	}
	if s := series(fams, "DCGM_FI_DEV_FB_USED", map[string]string{"gpu": "1", "GPU_I_PROFILE": "2g.10gb"}); len(s) != 1 || labels(s[0])["pod"] != "slice" {
		t.Errorf("MIG 2g.10gb held through a claim: %v", s)
	}
	if s := series(fams, "DCGM_FI_DEV_FB_USED", map[string]string{"gpu": "1", "GPU_I_PROFILE": "1g.5gb"}); len(s) != 1 || labels(s[0])["pod"] != "" {
		t.Errorf("unused MIG 1g.5gb: %v", s)
	}
}
