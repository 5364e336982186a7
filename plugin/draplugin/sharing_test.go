package draplugin

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	rspec "github.com/opencontainers/runtime-spec/specs-go"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/mps/mpstest"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

// The test binary is also the stand-in for NVIDIA's nvidia-cuda-mps-control (mpstest).
func TestMain(m *testing.M) { os.Exit(mpstest.Run(m)) }

// sharingDriver is a driver whose NVIDIA programs are stand-ins: nvidia-cuda-mps-control
// (mpstest) and an nvidia-smi that records its arguments; its MPS root is on a tmpfs.
type sharingDriver struct {
	*Driver
	cdiDir, smiLog string
}

func newSharingDriver(t *testing.T) *sharingDriver {
	t.Helper()
	s := &sharingDriver{cdiDir: t.TempDir()}
	s.Driver = newDriver(t, nil, s.cdiDir)
	writeNodeSpec(t, s.cdiDir, s.Driver)
	bin := t.TempDir()
	ctl, err := mpstest.Link(bin)
	if err != nil {
		t.Fatal(err)
	}
	s.smiLog = filepath.Join(bin, "nvidia-smi.log")
	smi := filepath.Join(bin, "nvidia-smi")
	if err := os.WriteFile(smi, []byte("#!/bin/sh\necho \"$*\" >> "+s.smiLog+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := os.MkdirTemp("/dev/shm", "gpupolicy-dra-mps-") // the shared memory must be a tmpfs
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	s.opts.MPSDir, s.opts.MPSHostRoot, s.opts.MPSControlBinary, s.opts.NvidiaSMI = root, "/run/nvidia/mps", ctl, smi
	return s
}

func (s *sharingDriver) smiCalls() []string {
	b, _ := os.ReadFile(s.smiLog)
	return strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(b)), " ", "_"))
}

func (s *sharingDriver) computeMode(t *testing.T, name string) nvml.ComputeMode {
	t.Helper()
	dev, _ := s.opts.Lib.DeviceGetHandleByUUID(s.byName[name].UUID)
	m, ret := dev.GetComputeMode()
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	return m
}

// withConfig adds an opaque config of driver (for requests; none: all) from source.
func withConfig(c *resourceapi.ResourceClaim, source resourceapi.AllocationConfigSource, driver, params string, requests ...string) *resourceapi.ResourceClaim {
	c.Status.Allocation.Devices.Config = append(c.Status.Allocation.Devices.Config, resourceapi.DeviceAllocationConfiguration{
		Source: source, Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(params)}}},
	})
	return c
}

const gpuConfig = `{"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", `

func (s *sharingDriver) prepare(t *testing.T, c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	t.Helper()
	res, err := s.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil {
		t.Fatal(err)
	}
	return res[c.UID]
}

func (s *sharingDriver) unprepare(t *testing.T, uid string) {
	t.Helper()
	res, err := s.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: types.UID(uid)}})
	if err != nil || res[types.UID(uid)] != nil {
		t.Fatalf("unprepare: %v %v", err, res[types.UID(uid)])
	}
}

// A claim's TimeSlicing config sets each of its GPUs' time-slice as NVIDIA's driver does
// (compute mode DEFAULT, nvidia-smi compute-policy --set-timeslice), the claim's config over
// its class's; unprepare sets them back to Default. A claim without config changes nothing.
func TestClaimTimeSlicing(t *testing.T) {
	s := newSharingDriver(t)
	c := withConfig(claim("uid-ts", "gpu-1", "gpu-2"), resourceapi.AllocationConfigSourceClass, config.DRADriverName,
		gpuConfig+`"sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Short"}}}`)
	withConfig(c, resourceapi.AllocationConfigSourceClaim, config.DRADriverName,
		gpuConfig+`"sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}`, "gpu")
	// Another driver's config is not ours to read.
	withConfig(c, resourceapi.AllocationConfigSourceClaim, "other.example.com", `{"not": "ours"}`)
	if res := s.prepare(t, c); res.Err != nil {
		t.Fatal(res.Err)
	}
	u1, u2 := s.byName["gpu-1"].UUID, s.byName["gpu-2"].UUID
	want := []string{"compute-policy_-i_" + u1 + "_--set-timeslice=3", "compute-policy_-i_" + u2 + "_--set-timeslice=3"}
	if got := s.smiCalls(); !slices.Equal(got, want) {
		t.Errorf("nvidia-smi calls %v, want %v", got, want)
	}
	if s.prepare(t, claim("uid-plain", "gpu-3")).Err != nil || len(s.smiCalls()) != 2 {
		t.Errorf("a claim without config called nvidia-smi: %v", s.smiCalls())
	}
	s.unprepare(t, "uid-ts")
	want = append(want, "compute-policy_-i_"+u1+"_--set-timeslice=0", "compute-policy_-i_"+u2+"_--set-timeslice=0")
	if got := s.smiCalls(); !slices.Equal(got, want) {
		t.Errorf("after unprepare: nvidia-smi calls %v, want %v", got, want)
	}
}

// A claim's MPS config starts one control daemon for its GPUs with the config's defaults
// (NVIDIA's normalization of the pinned memory limits: the default for every device, then per
// device by index or UUID), puts them in EXCLUSIVE_PROCESS mode and gives the containers
// NVIDIA's edits; a restarted plugin starts the daemon again; unprepare stops it.
func TestClaimMPS(t *testing.T) {
	s := newSharingDriver(t)
	c := withConfig(claim("uid-mps", "gpu-1", "gpu-2"), resourceapi.AllocationConfigSourceClaim, config.DRADriverName,
		gpuConfig+`"sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50,
		"defaultPinnedDeviceMemoryLimit": "10Gi", "defaultPerDevicePinnedMemoryLimit": {"1": "5Gi"}}}}`)
	res := s.prepare(t, c)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	u1, u2 := s.byName["gpu-1"].UUID, s.byName["gpu-2"].UUID
	id := mpsID("uid-mps", []string{u1, u2})
	ctl := s.mpsControl(id, "")
	t.Cleanup(func() { _, _ = ctl.Send("quit") })
	ask := func(cmd string) string {
		t.Helper()
		got, err := ctl.Send(cmd)
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		return got
	}
	if got := ask("get_default_active_thread_percentage"); got != "50.0" {
		t.Errorf("active thread percentage %q, want 50.0", got)
	}
	if a, b := ask("get_default_device_pinned_mem_limit "+u1), ask("get_default_device_pinned_mem_limit "+u2); a != "10240M" || b != "5120M" {
		t.Errorf("pinned memory limits %q %q, want 10240M 5120M", a, b)
	}
	for _, n := range []string{"gpu-1", "gpu-2"} {
		if m := s.computeMode(t, n); m != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
			t.Errorf("%s compute mode %d, want EXCLUSIVE_PROCESS", n, m)
		}
	}
	// The container, through the CDI library runtimes use: NVIDIA's variable and mounts.
	oci := injectSpec(t, s.cdiDir, containerIDs(res, "gpu"))
	if !slices.Contains(oci.Process.Env, "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps") {
		t.Errorf("env %v lacks CUDA_MPS_PIPE_DIRECTORY", oci.Process.Env)
	}
	var mounts []string
	for _, m := range oci.Mounts {
		mounts = append(mounts, m.Source+":"+m.Destination)
	}
	root := "/run/nvidia/mps/dra/" + id
	if want := []string{root + "/shm:/dev/shm", root + "/pipe:/tmp/nvidia-mps"}; !slices.Equal(mounts, want) {
		t.Errorf("mounts %v, want %v", mounts, want)
	}

	// The plugin restarts (its container ended, and the daemon with it): the new one starts it.
	ask("quit")
	s2 := &sharingDriver{Driver: newDriver(t, s.opts.Lib.(*gpumock.Mock), s.cdiDir), cdiDir: s.cdiDir}
	s2.opts.MPSDir, s2.opts.MPSHostRoot, s2.opts.MPSControlBinary, s2.opts.NvidiaSMI = s.opts.MPSDir, s.opts.MPSHostRoot, s.opts.MPSControlBinary, s.opts.NvidiaSMI
	s2.resumeSharing()
	if got := ask("get_default_active_thread_percentage"); got != "50.0" {
		t.Errorf("after a restart: active thread percentage %q, want 50.0", got)
	}

	s2.unprepare(t, "uid-mps")
	if ctl.Answers() {
		t.Error("the claim's MPS control daemon still answers after unprepare")
	}
	for _, n := range []string{"gpu-1", "gpu-2"} {
		if m := s2.computeMode(t, n); m != nvml.COMPUTEMODE_DEFAULT {
			t.Errorf("%s compute mode %d after unprepare, want DEFAULT", n, m)
		}
	}
	if _, err := os.Stat(filepath.Join(s.opts.MPSDir, "dra", id)); !os.IsNotExist(err) {
		t.Errorf("the daemon's directory is left: %v", err)
	}
}

// A config this driver cannot apply refuses the claim with the reason (to the kubelet and as an
// Event on the claim), changes nothing and writes no CDI spec.
func TestClaimConfigRefusals(t *testing.T) {
	for _, tc := range []struct{ name, params, want string }{
		{"unknown kind", `{"apiVersion": "resource.nvidia.com/v1beta1", "kind": "VfioDeviceConfig"}`, `kind "VfioDeviceConfig" is not a configuration this driver applies`},
		{"other version", `{"apiVersion": "resource.nvidia.com/v1alpha1", "kind": "GpuConfig"}`, `apiVersion "resource.nvidia.com/v1alpha1": want resource.nvidia.com/v1beta1`},
		{"unknown field", gpuConfig + `"sharing": {"strategy": "MPS", "mpsConfig": {"activeThreads": 10}}}`, `unknown field "activeThreads"`},
		{"unknown strategy", gpuConfig + `"sharing": {"strategy": "Spatial"}}`, `unknown GPU sharing strategy "Spatial"`},
		{"fabric", gpuConfig + `"sharing": {"strategy": "Fabric"}}`, "Fabric GPU sharing strategy is not enabled"},
		{"unknown interval", gpuConfig + `"sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Forever"}}}`, `unknown time-slice interval "Forever"`},
		{"time-slicing with MPS settings", gpuConfig + `"sharing": {"strategy": "TimeSlicing", "mpsConfig": {}}}`, `cannot use MpsConfig with the "TimeSlicing" strategy`},
		{"MPS with time-slicing settings", gpuConfig + `"sharing": {"strategy": "MPS", "timeSlicingConfig": {}}}`, `cannot use TimeSlicingConfig with the "MPS" strategy`},
		{"thread percentage", gpuConfig + `"sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 150}}}`, "150 is not between 0 and 100"},
		{"pinned limit of no device", gpuConfig + `"sharing": {"strategy": "MPS", "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": {"5": "1Gi"}}}}`, "defaultPerDevicePinnedMemoryLimit[5]: names no device of the claim"},
		{"pinned limit too low", gpuConfig + `"sharing": {"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "1Ki"}}}`, "under 1Mi"},
		{"MIG config for a GPU", `{"apiVersion": "resource.nvidia.com/v1beta1", "kind": "MigDeviceConfig"}`, "a MigDeviceConfig cannot configure gpu-1, a whole GPU: use a GpuConfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSharingDriver(t)
			c := withConfig(claim("uid-bad", "gpu-1"), resourceapi.AllocationConfigSourceClaim, config.DRADriverName, tc.params)
			if _, err := s.opts.KubeClient.ResourceV1().ResourceClaims("ml").Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			res := s.prepare(t, c)
			if res.Err == nil || !strings.Contains(res.Err.Error(), tc.want) || !strings.Contains(res.Err.Error(), "claim ml/c-uid-bad") {
				t.Fatalf("prepare: %v, want an error with %q", res.Err, tc.want)
			}
			if left, _ := filepath.Glob(filepath.Join(s.cdiDir, config.DRAClaimCDIFilePrefix+"*")); len(left) != 0 {
				t.Errorf("a refused claim left %v", left)
			}
			if calls := s.smiCalls(); len(calls) != 0 || s.computeMode(t, "gpu-1") != nvml.COMPUTEMODE_DEFAULT {
				t.Errorf("a refused claim changed the GPU: nvidia-smi %v, compute mode %d", calls, s.computeMode(t, "gpu-1"))
			}
			evs, _ := s.opts.KubeClient.CoreV1().Events("ml").List(context.Background(), metav1.ListOptions{})
			if len(evs.Items) != 1 || evs.Items[0].InvolvedObject.Name != "c-uid-bad" || evs.Items[0].Reason != ReasonInvalidDeviceConfig || !strings.Contains(evs.Items[0].Message, tc.want) {
				t.Errorf("events on the claim: %+v", evs.Items)
			}
			// The device's Ready condition in the claim's status says the same.
			got, err := s.opts.KubeClient.ResourceV1().ResourceClaims("ml").Get(context.Background(), "c-uid-bad", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if ds := got.Status.Devices; len(ds) != 1 || ds[0].Device != "gpu-1" || ds[0].Driver != config.DRADriverName || len(ds[0].Conditions) != 1 ||
				ds[0].Conditions[0].Type != "Ready" || ds[0].Conditions[0].Status != metav1.ConditionFalse ||
				ds[0].Conditions[0].Reason != ReasonInvalidDeviceConfig || !strings.Contains(ds[0].Conditions[0].Message, tc.want) {
				t.Errorf("claim status devices %+v", ds)
			}
			if got.Status.Allocation == nil {
				t.Error("the status apply dropped the allocation")
			}
		})
	}
}

func injectSpec(t *testing.T, dir string, ids []string) *rspec.Spec {
	t.Helper()
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	oci := &rspec.Spec{Process: &rspec.Process{}}
	if _, err := cache.InjectDevices(oci, ids...); err != nil {
		t.Fatalf("inject %v: %v", ids, err)
	}
	return oci
}

// A config the node cannot apply (here NVIDIA's MPS control program is missing) is the node's
// failure, not the claim's: refused with reason SharingFailed, nothing left behind.
func TestClaimSharingFailureIsTheNodes(t *testing.T) {
	s := newSharingDriver(t)
	s.opts.MPSControlBinary = filepath.Join(t.TempDir(), mpstest.Name)
	c := withConfig(claim("uid-mps", "gpu-1"), resourceapi.AllocationConfigSourceClaim, config.DRADriverName,
		gpuConfig+`"sharing": {"strategy": "MPS"}}`)
	if _, err := s.opts.KubeClient.ResourceV1().ResourceClaims("ml").Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	res := s.prepare(t, c)
	if res.Err == nil || !strings.Contains(res.Err.Error(), "is not in the DRA plugin's container") {
		t.Fatalf("prepare: %v", res.Err)
	}
	evs, _ := s.opts.KubeClient.CoreV1().Events("ml").List(context.Background(), metav1.ListOptions{})
	if len(evs.Items) != 1 || evs.Items[0].Reason != ReasonSharingFailed {
		t.Errorf("events %+v", evs.Items)
	}
	if m := s.computeMode(t, "gpu-1"); m != nvml.COMPUTEMODE_DEFAULT {
		t.Errorf("compute mode %d left behind, want DEFAULT", m)
	}
	if left, _ := filepath.Glob(filepath.Join(s.opts.MPSDir, "dra", "*")); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}
