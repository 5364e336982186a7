package deviceplugin_test

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpupolicy/gpupolicy/internal/peer"
	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

// nvidiaResult is dp-allocate's answer for one resource (k8s-device-plugin v0.17.4's servers).
type nvidiaResult struct {
	Devices []string `json:"devices"`
	Results []struct {
		Responses []struct {
			Envs   map[string]string `json:"envs"`
			Mounts []struct {
				ContainerPath string `json:"container_path"`
				HostPath      string `json:"host_path"`
				ReadOnly      bool   `json:"read_only"`
			} `json:"mounts"`
		} `json:"responses"`
		Error string `json:"error"`
	} `json:"results"`
}

// answer is one Allocate answer in a form both plugins' answers reduce to.
type answer struct {
	err    bool
	envs   map[string]string
	mounts []string
}

// TestAllocateMatchesNVIDIA: for the same sharing config, said NVIDIA's way (a
// k8s-device-plugin config file) and gpupolicy's (the rendered device plugin config),
// k8s-device-plugin v0.17.4's own device plugin servers (dp-allocate) and gpupolicy's advertise
// the same resource with the same device ids and answer each Allocate request alike: the same
// environment and mounts (MPS: NVIDIA's pipe directory, /dev/shm and CUDA_MPS_PIPE_DIRECTORY),
// or both refuse it (two MPS replicas in one container). The envvar strategy is compared: under
// cdi-cri the CDI names differ on purpose (NVIDIA's own spec vendor k8s.device-plugin.nvidia.com,
// gpupolicy's the node spec nvidia-ctk generates). One difference is kept on purpose and
// normalized here: several time-sliced replicas of one GPU in a container are one UUID in
// gpupolicy's NVIDIA_VISIBLE_DEVICES, repeated in NVIDIA's (the container sees one GPU either
// way, and a CDI device list cannot repeat a device).
func TestAllocateMatchesNVIDIA(t *testing.T) {
	bin := peer.DPAllocate(t)
	m, err := gpumock.New("dgxa100")
	if err != nil {
		t.Fatal(err)
	}
	var u []string
	for _, d := range m.Devices {
		id, _ := d.GetUUID()
		u = append(u, id)
	}
	for _, tc := range []struct {
		name     string
		nvidia   string // k8s-device-plugin config file
		mpsRoot  bool
		cfg      func(*config.DevicePlugin)
		requests [][][]string // per request, per container, device ids
	}{
		{name: "mps", mpsRoot: true,
			nvidia:   "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n",
			cfg:      func(c *config.DevicePlugin) { c.Sharing.MPS = &config.MPS{Replicas: 4} },
			requests: [][][]string{{{u[0] + "::1"}}, {{u[0] + "::1", u[1] + "::0"}}, {{u[0] + "::1"}, {u[1] + "::2"}}}},
		{name: "mps renamed", mpsRoot: true,
			nvidia: "version: v1\nsharing:\n  mps:\n    renameByDefault: true\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n",
			cfg: func(c *config.DevicePlugin) {
				c.ResourceName = "nvidia.com/gpu.shared"
				c.Sharing.MPS = &config.MPS{Replicas: 2}
			},
			requests: [][][]string{{{u[7] + "::1"}}}},
		{name: "time-slicing",
			nvidia:   "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n",
			cfg:      func(c *config.DevicePlugin) { c.Sharing.TimeSlicing.Replicas = 4 },
			requests: [][][]string{{{u[0] + "::1"}}, {{u[0] + "::1", u[0] + "::2", u[1] + "::0"}}}},
		{name: "whole GPUs",
			nvidia:   "version: v1\n",
			cfg:      func(*config.DevicePlugin) {},
			requests: [][][]string{{{u[3], u[5]}}, {{"GPU-not-here"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(file, []byte(tc.nvidia), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"--config-file", file}
			if tc.mpsRoot {
				args = append(args, "--mps-root", config.MPSHostRoot)
			}
			for _, req := range tc.requests {
				var ctrs []string
				for _, ids := range req {
					ctrs = append(ctrs, strings.Join(ids, ","))
				}
				args = append(args, strings.Join(ctrs, ";"))
			}
			out, err := exec.Command(bin, args...).Output()
			if err != nil {
				t.Fatalf("dp-allocate: %v", err)
			}
			var theirs map[string]nvidiaResult
			if err := json.Unmarshal(out, &theirs); err != nil {
				t.Fatal(err)
			}

			cfg := config.DefaultDevicePlugin()
			cfg.DeviceListStrategy = config.DeviceListEnvVar
			cfg.HealthChecks.Enabled = false
			tc.cfg(&cfg)
			mgr, err := deviceplugin.New(deviceplugin.Options{Lib: m, Config: cfg, PluginDir: t.TempDir(), HostRoot: t.TempDir(), Logger: testLogger()})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, p := range mgr.Plugins() {
				names = append(names, p.Resource())
			}
			if want := slices.Sorted(maps.Keys(theirs)); !slices.Equal(names, want) {
				t.Fatalf("resources %v, NVIDIA's %v", names, want)
			}
			for _, p := range mgr.Plugins() {
				nv := theirs[p.Resource()]
				var ids []string
				for _, d := range p.Devices() {
					ids = append(ids, d.ID)
				}
				sort.Strings(ids)
				if !slices.Equal(ids, nv.Devices) {
					t.Errorf("%s: %d devices %v..., NVIDIA's %d %v...", p.Resource(), len(ids), first(ids), len(nv.Devices), first(nv.Devices))
				}
				for i, req := range tc.requests {
					areq := &pluginapi.AllocateRequest{}
					for _, ids := range req {
						areq.ContainerRequests = append(areq.ContainerRequests, &pluginapi.ContainerAllocateRequest{DevicesIds: ids})
					}
					resp, err := p.Allocate(context.Background(), areq)
					var ours, want []answer
					if err != nil {
						ours = []answer{{err: true}}
					} else {
						for _, r := range resp.ContainerResponses {
							a := answer{envs: r.Envs}
							for _, mt := range r.Mounts {
								a.mounts = append(a.mounts, mt.HostPath+":"+mt.ContainerPath+":"+boolString(mt.ReadOnly))
							}
							ours = append(ours, a)
						}
					}
					if nv.Results[i].Error != "" {
						want = []answer{{err: true}}
					}
					for _, r := range nv.Results[i].Responses {
						a := answer{envs: r.Envs}
						if v, ok := a.envs["NVIDIA_VISIBLE_DEVICES"]; ok {
							a.envs["NVIDIA_VISIBLE_DEVICES"] = strings.Join(uniq(strings.Split(v, ",")), ",")
						}
						for _, mt := range r.Mounts {
							a.mounts = append(a.mounts, mt.HostPath+":"+mt.ContainerPath+":"+boolString(mt.ReadOnly))
						}
						want = append(want, a)
					}
					if !sameAnswers(ours, want) {
						t.Errorf("%s: request %v: ours %+v (error %v), NVIDIA's %+v (error %q)", p.Resource(), req, ours, err, want, nv.Results[i].Error)
					}
				}
			}
		})
	}
}

func sameAnswers(a, b []answer) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].err != b[i].err || !slices.Equal(a[i].mounts, b[i].mounts) || len(a[i].envs) != len(b[i].envs) {
			return false
		}
		for k, v := range a[i].envs {
			if b[i].envs[k] != v {
				return false
			}
		}
	}
	return true
}

func uniq(s []string) []string {
	var out []string
	for _, v := range s {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

func first(s []string) []string { return s[:min(2, len(s))] }

func boolString(b bool) string {
	if b {
		return "ro"
	}
	return "rw"
}
