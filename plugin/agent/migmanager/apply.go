// Package migmanager is the node agent's MIG step (`gpu-node-agent mig`): it applies the MIG
// layout a node should run (its nvidia.com/mig.config label, else its pool's layout) through
// the NVML seam, and reports nvidia.com/mig.config.state with GPU Operator's values. apply.go
// is the NVML part: read each GPU's partitioning, leave a GPU already in place alone, refuse a
// GPU that pods hold, switch MIG mode (a change that needs a reset is reported, not retried),
// and create GPU and compute instances at placements that fit together. run.go is the node
// part: state labels, gates, Events, the timeout.
package migmanager

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/gpulib"
	"github.com/gpupolicy/gpupolicy/plugin/mig"
)

// GPUChange is what applying a layout did to one GPU.
type GPUChange struct {
	GPU     int
	Changed bool // instances or MIG mode changed (MIG UUIDs changed)
	Reason  string
}

// Holders names the pods holding each GPU (by index); the step never changes a held GPU.
type Holders map[int][]string

// BusyError refuses a layout because pods hold GPUs it would change.
type BusyError struct{ Held Holders }

func (e *BusyError) Error() string {
	var parts []string
	for _, gpu := range slices.Sorted(maps.Keys(e.Held)) {
		parts = append(parts, fmt.Sprintf("GPU %d by %s", gpu, strings.Join(e.Held[gpu], ", ")))
	}
	return "pods hold GPUs the layout changes, so they are left as they are until the pods end: " + strings.Join(parts, "; ")
}

// ResetError reports GPUs whose MIG mode switches only after a GPU reset or reboot.
type ResetError struct{ GPUs []int }

func (e *ResetError) Error() string {
	return fmt.Sprintf("GPU %s: the MIG mode change is pending until the GPU is reset (nvidia-smi -r) or the node reboots; the step does not retry it", joinInts(e.GPUs))
}

// NVMLError is an NVML call that failed, in words.
type NVMLError struct {
	GPU  int
	Call string
	Ret  nvml.Return
}

func (e *NVMLError) Error() string {
	hint := ""
	switch e.Ret {
	case nvml.ERROR_INSUFFICIENT_RESOURCES:
		hint = ": the GPU has no room left for it (the layout does not fit this GPU model; check gpuProduct and the profiles)"
	case nvml.ERROR_NOT_SUPPORTED:
		hint = ": this GPU or driver does not support it (is the GPU MIG-capable and MIG mode on?)"
	case nvml.ERROR_NO_PERMISSION:
		hint = ": MIG changes need uid 0 and CAP_SYS_ADMIN with NVIDIA_MIG_CONFIG_DEVICES=all (the rendered gpu-mig-manager DaemonSet has them)"
	case nvml.ERROR_IN_USE:
		hint = ": a process still uses the GPU or instance (a workload outside Kubernetes, or nvidia-persistenced holding MIG mode)"
	case nvml.ERROR_INVALID_ARGUMENT:
		hint = ": NVML refused the placement or profile"
	}
	return fmt.Sprintf("GPU %d: %s: %s%s", e.GPU, e.Call, nvml.ErrorString(e.Ret), hint)
}

// gpuState is one GPU's partitioning as NVML reports it.
type gpuState struct {
	mode, pending int
	counts        map[string]int // GPU instances by profile name
	partial       bool           // a GPU instance without exactly one compute instance spanning it
	profiles      []mig.Profile
	infos         map[string]nvml.GpuInstanceProfileInfo
}

// Apply makes every GPU that layout covers match its entry, in GPU order, and returns what it
// did. It stops at the first GPU it cannot change; GPUs before it keep their new layout.
// held names the pods holding GPUs; a GPU that needs a change and is held is refused (all held
// GPUs are named in one BusyError, before anything changes).
func Apply(lib nvml.Interface, layout []mig.DeviceConfig, held Holders) ([]GPUChange, error) {
	gpus, err := readLayoutGPUs(lib, layout)
	if err != nil {
		return nil, err
	}
	var todo []layoutGPU
	var out []GPUChange
	busy := Holders{}
	var resets []int
	for _, g := range gpus {
		switch {
		case g.state.pending != g.state.mode && g.state.pending == modeOf(g.want.MigEnabled):
			resets = append(resets, g.index) // asked for earlier; only a reset completes it
		case inPlace(g.state, g.want):
			out = append(out, GPUChange{GPU: g.index, Reason: "already in place"})
		case len(held[g.index]) > 0:
			busy[g.index] = held[g.index]
		default:
			todo = append(todo, g)
		}
	}
	if len(busy) > 0 {
		return out, &BusyError{Held: busy}
	}
	for _, g := range todo {
		if err := applyGPU(g.index, g.dev, g.state, g.want); err != nil {
			var re *ResetError
			if errors.As(err, &re) {
				resets = append(resets, re.GPUs...)
				continue
			}
			return out, err
		}
		out = append(out, GPUChange{GPU: g.index, Changed: true, Reason: "applied"})
	}
	if len(resets) > 0 {
		slices.Sort(resets)
		return out, &ResetError{GPUs: resets}
	}
	return out, nil
}

// InPlace reports whether every GPU the layout covers already matches it (reads only).
func InPlace(lib nvml.Interface, layout []mig.DeviceConfig) (bool, error) {
	gpus, err := readLayoutGPUs(lib, layout)
	if err != nil {
		return false, err
	}
	for _, g := range gpus {
		if !inPlace(g.state, g.want) {
			return false, nil
		}
	}
	return true, nil
}

// layoutGPU is a GPU the layout covers, with its entry and its partitioning now.
type layoutGPU struct {
	index int
	dev   nvml.Device
	state gpuState
	want  mig.DeviceConfig
}

// readLayoutGPUs reads every GPU the layout covers; a layout that names a GPU the node does
// not have is an error.
func readLayoutGPUs(lib nvml.Interface, layout []mig.DeviceConfig) ([]layoutGPU, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, &NVMLError{GPU: -1, Call: "DeviceGetCount", Ret: ret}
	}
	for _, dc := range layout {
		for _, i := range dc.Devices.Indexes {
			if i >= n {
				return nil, fmt.Errorf("the layout names GPU %d, but this node has %d GPUs (0–%d)", i, n, n-1)
			}
		}
	}
	var out []layoutGPU
	for i := range n {
		want, ok := mig.ForGPU(layout, i)
		if !ok {
			continue
		}
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, &NVMLError{GPU: i, Call: "DeviceGetHandleByIndex", Ret: ret}
		}
		st, err := readGPU(i, dev)
		if err != nil {
			return nil, err
		}
		out = append(out, layoutGPU{index: i, dev: dev, state: st, want: want})
	}
	return out, nil
}

func modeOf(enabled bool) int {
	if enabled {
		return nvml.DEVICE_MIG_ENABLE
	}
	return nvml.DEVICE_MIG_DISABLE
}

// inPlace reports whether st already is want: same MIG mode, nothing pending, and with MIG on
// exactly the wanted GPU instances, each with one compute instance spanning it.
func inPlace(st gpuState, want mig.DeviceConfig) bool {
	if st.mode != modeOf(want.MigEnabled) || st.pending != st.mode {
		return false
	}
	if !want.MigEnabled {
		return true
	}
	return !st.partial && maps.Equal(st.counts, nonZero(want.MigDevices))
}

func nonZero(m map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		if v > 0 {
			out[k] = v
		}
	}
	return out
}

// readGPU reads a GPU's MIG mode, its profiles with their placements, and its instances.
func readGPU(i int, dev nvml.Device) (gpuState, error) {
	st := gpuState{counts: map[string]int{}, infos: map[string]nvml.GpuInstanceProfileInfo{}}
	var ret nvml.Return
	st.mode, st.pending, ret = dev.GetMigMode()
	switch {
	case ret == nvml.ERROR_NOT_SUPPORTED:
		return st, fmt.Errorf("GPU %d does not support MIG (NVML: %s): remove it from the layout or pick a MIG-capable pool", i, nvml.ErrorString(ret))
	case ret != nvml.SUCCESS:
		return st, &NVMLError{GPU: i, Call: "DeviceGetMigMode", Ret: ret}
	}
	for id := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := dev.GetGpuInstanceProfileInfo(id)
		if ret != nvml.SUCCESS {
			continue // not a profile of this GPU
		}
		name := gpulib.GPUInstanceProfileName(info)
		if _, dup := st.infos[name]; dup {
			continue
		}
		st.infos[name] = info
		p := mig.Profile{Name: name, Compute: int(info.SliceCount), Max: int(info.InstanceCount)}
		if places, ret := dev.GetGpuInstancePossiblePlacements(&info); ret == nvml.SUCCESS {
			for _, pl := range places {
				p.Starts = append(p.Starts, int(pl.Start))
				p.Memory = int(pl.Size)
			}
		}
		st.profiles = append(st.profiles, p)
		if st.mode != nvml.DEVICE_MIG_ENABLE {
			continue
		}
		gis, ret := dev.GetGpuInstances(&info)
		if ret != nvml.SUCCESS {
			return st, &NVMLError{GPU: i, Call: "DeviceGetGpuInstances(" + name + ")", Ret: ret}
		}
		for _, gi := range gis {
			st.counts[name]++
			cis, err := computeInstances(gi)
			if err != nil {
				return st, &NVMLError{GPU: i, Call: "GpuInstanceGetComputeInstances", Ret: err.(nvml.Return)}
			}
			if len(cis) != 1 || cis[0].SliceCount != info.SliceCount {
				st.partial = true
			}
		}
	}
	return st, nil
}

type ciInfo struct {
	ci         nvml.ComputeInstance
	SliceCount uint32
}

// computeInstances lists a GPU instance's compute instances with their slice counts.
func computeInstances(gi nvml.GpuInstance) ([]ciInfo, error) {
	var out []ciInfo
	for id := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		info, ret := gi.GetComputeInstanceProfileInfo(id, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			continue
		}
		cis, ret := gi.GetComputeInstances(&info)
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		for _, ci := range cis {
			out = append(out, ciInfo{ci, info.SliceCount})
		}
	}
	return out, nil
}

// applyGPU destroys the GPU's instances, switches MIG mode when it differs and creates the
// wanted instances at placements that fit together.
func applyGPU(i int, dev nvml.Device, st gpuState, want mig.DeviceConfig) error {
	var places []mig.Placement
	if want.MigEnabled {
		var err error
		if places, err = mig.Fit(st.profiles, nonZero(want.MigDevices)); err != nil {
			return fmt.Errorf("GPU %d: %w", i, err)
		}
	}
	if err := destroyAll(i, dev, st); err != nil {
		return err
	}
	wantMode := modeOf(want.MigEnabled)
	if st.mode != wantMode {
		activation, ret := dev.SetMigMode(wantMode)
		if ret != nvml.SUCCESS {
			return &NVMLError{GPU: i, Call: "DeviceSetMigMode", Ret: ret}
		}
		if cur, _, ret := dev.GetMigMode(); activation != nvml.SUCCESS || ret != nvml.SUCCESS || cur != wantMode {
			return &ResetError{GPUs: []int{i}}
		}
	}
	for _, pl := range places {
		info := st.infos[pl.Profile]
		gi, ret := dev.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(pl.Start), Size: uint32(pl.Size)})
		if ret != nvml.SUCCESS {
			return &NVMLError{GPU: i, Call: fmt.Sprintf("DeviceCreateGpuInstanceWithPlacement(%s at %d)", pl.Profile, pl.Start), Ret: ret}
		}
		if err := spanningComputeInstance(i, gi, info, pl.Profile); err != nil {
			return err
		}
	}
	return nil
}

// spanningComputeInstance creates the one compute instance that spans gi, as mig-parted does
// for a plain profile.
func spanningComputeInstance(i int, gi nvml.GpuInstance, info nvml.GpuInstanceProfileInfo, name string) error {
	for id := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		ci, ret := gi.GetComputeInstanceProfileInfo(id, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS || ci.SliceCount != info.SliceCount {
			continue
		}
		if _, ret := gi.CreateComputeInstance(&ci); ret != nvml.SUCCESS {
			return &NVMLError{GPU: i, Call: "GpuInstanceCreateComputeInstance(" + name + ")", Ret: ret}
		}
		return nil
	}
	return fmt.Errorf("GPU %d: no compute instance profile spans the %d slices of %s", i, info.SliceCount, name)
}

// destroyAll destroys every compute and GPU instance of the GPU (compute instances first:
// NVML refuses to destroy a GPU instance that still has them).
func destroyAll(i int, dev nvml.Device, st gpuState) error {
	if st.mode != nvml.DEVICE_MIG_ENABLE {
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(st.infos)) {
		info := st.infos[name]
		gis, ret := dev.GetGpuInstances(&info)
		if ret != nvml.SUCCESS {
			return &NVMLError{GPU: i, Call: "DeviceGetGpuInstances(" + name + ")", Ret: ret}
		}
		for _, gi := range gis {
			cis, err := computeInstances(gi)
			if err != nil {
				return &NVMLError{GPU: i, Call: "GpuInstanceGetComputeInstances", Ret: err.(nvml.Return)}
			}
			for _, c := range cis {
				if ret := c.ci.Destroy(); ret != nvml.SUCCESS {
					return &NVMLError{GPU: i, Call: "ComputeInstanceDestroy(" + name + ")", Ret: ret}
				}
			}
			if ret := gi.Destroy(); ret != nvml.SUCCESS {
				return &NVMLError{GPU: i, Call: "GpuInstanceDestroy(" + name + ")", Ret: ret}
			}
		}
	}
	return nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}
