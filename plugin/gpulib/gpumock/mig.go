package gpumock

// MIG on the mock, like the hardware: MIG mode (current and pending), GPU instances at the
// placements NVML reports, compute instances inside them, and NVML's errors for what a real
// A100 refuses (no MIG mode, a profile at its instance count or without a free placement,
// destroying an instance that still holds compute instances, switching MIG mode while
// instances exist). The parent then enumerates MIG device handles that answer like real ones
// (UUID "MIG-...", attributes with slice counts and memory, instance ids, parent handle).
//
// The node programs are separate processes (agent, device plugin, exporter) that must see one
// partitioning, as they do on one GPU: with a state file (WithMIGStateFile, or the environment
// variable MIGStateEnv) every MIG read loads it and every change rewrites it atomically.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/uuid"

	"github.com/gpupolicy/gpupolicy/plugin/mig"
)

// MIGStateEnv names the MIG state file every --nvml-mock program of one node shares (for
// demos and tests: the e2e harness points it into the node's host root).
const MIGStateEnv = "GPUPOLICY_NVML_MOCK_MIG_STATE"

// WithMIGStateFile keeps the mock's MIG state in path, shared with every mock that uses the
// same file ("" keeps it in memory; New reads MIGStateEnv when no option sets it).
func WithMIGStateFile(path string) Option {
	return func(m *Mock) {
		if m.dev != nil {
			m.dev.migFile = path
		}
	}
}

// migState is the MIG partitioning of every GPU, as persisted.
type migState struct {
	GPUs []gpuMIG `json:"gpus"`
}

type gpuMIG struct {
	Mode    int `json:"mode"`    // current MIG mode (nvml.DEVICE_MIG_ENABLE/DISABLE)
	Pending int `json:"pending"` // the mode after the next GPU reset
	// ResetRequired makes a MIG mode change pending until ResetGPU, as on hosts where the
	// driver cannot reset the GPU while something holds it (a fault a test injects).
	ResetRequired bool     `json:"resetRequired,omitempty"`
	GIs           []giMock `json:"gpuInstances,omitempty"`
}

type giMock struct {
	ID      int      `json:"id"`
	Profile int      `json:"profile"` // nvml.GPU_INSTANCE_PROFILE_*
	Start   int      `json:"start"`
	Size    int      `json:"size"`
	CIs     []ciMock `json:"computeInstances,omitempty"`
}

type ciMock struct {
	ID      int `json:"id"`
	Profile int `json:"profile"` // nvml.COMPUTE_INSTANCE_PROFILE_*
}

// withMIG runs f on the current MIG state under the device lock: loaded from the state file
// when there is one, and written back atomically when f reports a change.
func (st *deviceState) withMIG(f func(s *migState) (changed bool)) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.migFile != "" {
		b, err := os.ReadFile(st.migFile)
		switch {
		case errors.Is(err, os.ErrNotExist):
			st.mig = st.freshMIG()
		case err != nil:
			return err
		case string(b) != string(st.migRaw):
			var s migState
			if err := json.Unmarshal(b, &s); err != nil || len(s.GPUs) != len(st.gpus) {
				return fmt.Errorf("mock MIG state %s is unreadable or for another GPU count: %v", st.migFile, err)
			}
			st.mig, st.migRaw = s, b // another process changed the partitioning
		}
	}
	if !f(&st.mig) {
		return nil
	}
	if st.migFile == "" {
		return nil
	}
	b, _ := json.MarshalIndent(st.mig, "", " ")
	st.migRaw = b
	tmp, err := os.CreateTemp(filepath.Dir(st.migFile), ".mig-state-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), st.migFile)
}

func (st *deviceState) freshMIG() migState {
	return migState{GPUs: make([]gpuMIG, len(st.gpus))}
}

// read runs f on the current state without changing it; an unreadable state file reads as
// NVML's ERROR_UNKNOWN.
func (st *deviceState) read(f func(s *migState)) nvml.Return {
	if err := st.withMIG(func(s *migState) bool { f(s); return false }); err != nil {
		return nvml.ERROR_UNKNOWN
	}
	return nvml.SUCCESS
}

// change runs f, which returns NVML's verdict; the state is written only on SUCCESS.
func (st *deviceState) change(f func(s *migState) nvml.Return) nvml.Return {
	ret := nvml.SUCCESS
	if err := st.withMIG(func(s *migState) bool { ret = f(s); return ret == nvml.SUCCESS }); err != nil {
		return nvml.ERROR_UNKNOWN
	}
	return ret
}

// migDevices returns GPU i's MIG device handles, one per compute instance in GPU instance id
// order, made again only when the GPU's partitioning changed since they were made (a handle
// is a large struct; a layout change makes dozens of NVML calls). Called with st.mu held.
func (st *deviceState) migDevices(i int) []*mock.Device {
	if st.built == nil {
		st.built = make([]*gpuMIG, len(st.gpus))
	}
	g := st.mig.GPUs[i]
	if b := st.built[i]; b != nil && reflect.DeepEqual(*b, g) {
		return st.migs[i]
	}
	g = cloneGPU(g)
	st.built[i] = &g
	d := st.gpus[i]
	var devs []*mock.Device
	if g.Mode == nvml.DEVICE_MIG_ENABLE {
		for _, gi := range g.GIs {
			gp := d.Config.MIGProfiles.GpuInstanceProfiles[gi.Profile]
			for _, ci := range gi.CIs {
				cp := d.Config.MIGProfiles.ComputeInstanceProfiles[gi.Profile][ci.Profile]
				devs = append(devs, newMockMIGDevice(st, i, d, gp, cp, gi.ID, ci.ID))
			}
		}
	}
	st.migs[i] = devs
	return devs
}

func cloneGPU(g gpuMIG) gpuMIG {
	g.GIs = slices.Clone(g.GIs)
	for k := range g.GIs {
		g.GIs[k].CIs = slices.Clone(g.GIs[k].CIs)
	}
	return g
}

// ResetGPU is a GPU reset (or a reboot): a pending MIG mode becomes the current one.
func (m *Mock) ResetGPU(gpu int) error {
	st, err := m.state(gpu)
	if err != nil {
		return err
	}
	return st.withMIG(func(s *migState) bool {
		g := &s.GPUs[gpu]
		g.Mode = g.Pending
		g.GIs = nil
		return true
	})
}

// RequireResetForMIG makes MIG mode changes of GPU gpu wait for ResetGPU (NVML answers
// ERROR_RESET_REQUIRED as the activation status), as a driver does when it cannot reset a GPU
// in use.
func (m *Mock) RequireResetForMIG(gpu int, required bool) error {
	st, err := m.state(gpu)
	if err != nil {
		return err
	}
	return st.withMIG(func(s *migState) bool { s.GPUs[gpu].ResetRequired = required; return true })
}

// ConfigureMIG partitions GPU gpu the way `nvidia-smi mig -cgi ... -C` does: MIG mode on and
// one GPU instance per profile id (nvml.GPU_INSTANCE_PROFILE_*), each at a placement that
// leaves room for the others, with one compute instance spanning it. Existing instances are
// destroyed first. With no profile ids it disables MIG again. It goes through the same NVML
// calls a program makes, so an impossible partitioning fails with NVML's error.
func (m *Mock) ConfigureMIG(gpu int, giProfiles ...int) error {
	st, err := m.state(gpu)
	if err != nil {
		return err
	}
	parent := st.gpus[gpu]
	if err := st.withMIG(func(s *migState) bool { s.GPUs[gpu].GIs = nil; return true }); err != nil {
		return err
	}
	mode := nvml.DEVICE_MIG_DISABLE
	if len(giProfiles) > 0 {
		mode = nvml.DEVICE_MIG_ENABLE
	}
	if _, ret := parent.SetMigMode(mode); ret != nvml.SUCCESS {
		return fmt.Errorf("mock GPU %d: set MIG mode: %s", gpu, nvml.ErrorString(ret))
	}
	// Placements for all profiles at once, as the agent places a layout.
	var profiles []mig.Profile
	counts := map[string]int{}
	for _, id := range giProfiles {
		info, ret := parent.GetGpuInstanceProfileInfo(id)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("mock GPU %d: GPU instance profile %d: %s", gpu, id, nvml.ErrorString(ret))
		}
		name := strconv.Itoa(id)
		if counts[name] == 0 {
			p := mig.Profile{Name: name, Compute: int(info.SliceCount), Max: int(info.InstanceCount)}
			for _, pl := range parent.Config.MIGProfiles.GpuInstancePlacements[id] {
				p.Starts = append(p.Starts, int(pl.Start))
				p.Memory = int(pl.Size)
			}
			profiles = append(profiles, p)
		}
		counts[name]++
	}
	places, err := mig.Fit(profiles, counts)
	if err != nil && len(giProfiles) > 0 {
		return fmt.Errorf("mock GPU %d: %w", gpu, err)
	}
	// Created in the order given, so GPU instance ids (and MIG device order) follow it.
	byProfile := map[string][]mig.Placement{}
	for _, pl := range places {
		byProfile[pl.Profile] = append(byProfile[pl.Profile], pl)
	}
	for _, id := range giProfiles {
		name := strconv.Itoa(id)
		pl := byProfile[name][0]
		byProfile[name] = byProfile[name][1:]
		info, _ := parent.GetGpuInstanceProfileInfo(id)
		gi, ret := parent.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(pl.Start), Size: uint32(pl.Size)})
		if ret != nvml.SUCCESS {
			return fmt.Errorf("mock GPU %d: create GPU instance %d at %d: %s", gpu, id, pl.Start, nvml.ErrorString(ret))
		}
		ciID, ok := computeProfileForSlices[info.SliceCount]
		if !ok {
			return fmt.Errorf("mock GPU %d: no compute profile spans %d slices", gpu, info.SliceCount)
		}
		ciInfo, ret := gi.GetComputeInstanceProfileInfo(ciID, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("mock GPU %d: compute profile %d: %s", gpu, ciID, nvml.ErrorString(ret))
		}
		if _, ret := gi.CreateComputeInstance(&ciInfo); ret != nvml.SUCCESS {
			return fmt.Errorf("mock GPU %d: create compute instance: %s", gpu, nvml.ErrorString(ret))
		}
	}
	return nil
}

// computeProfileForSlices is the compute-instance profile that spans a whole GPU instance.
var computeProfileForSlices = map[uint32]int{
	1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE,
	2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
	3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE,
	4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
	7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE,
}

func newMockMIGDevice(st *deviceState, gpu int, parent *server.Device, gi nvml.GpuInstanceProfileInfo,
	ci nvml.ComputeInstanceProfileInfo, giID, ciID int) *mock.Device {
	// Deterministic per parent and instance, so a reconfigured mock keeps its MIG UUIDs.
	id := "MIG-" + uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "%s/%d/%d", parent.UUID, giID, ciID)).String()
	d := &mock.Device{}
	d.GetUUIDFunc = func() (string, nvml.Return) { return id, nvml.SUCCESS }
	d.GetNameFunc = func() (string, nvml.Return) { return parent.Config.Name, nvml.SUCCESS }
	d.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return true, nvml.SUCCESS }
	d.GetDeviceHandleFromMigDeviceHandleFunc = func() (nvml.Device, nvml.Return) { return parent, nvml.SUCCESS }
	d.GetGpuInstanceIdFunc = func() (int, nvml.Return) { return giID, nvml.SUCCESS }
	d.GetComputeInstanceIdFunc = func() (int, nvml.Return) { return ciID, nvml.SUCCESS }
	d.GetAttributesFunc = func() (nvml.DeviceAttributes, nvml.Return) {
		return nvml.DeviceAttributes{
			MultiprocessorCount:       ci.MultiprocessorCount,
			SharedCopyEngineCount:     gi.CopyEngineCount,
			SharedDecoderCount:        gi.DecoderCount,
			SharedEncoderCount:        gi.EncoderCount,
			SharedJpegCount:           gi.JpegCount,
			SharedOfaCount:            gi.OfaCount,
			GpuInstanceSliceCount:     gi.SliceCount,
			ComputeInstanceSliceCount: ci.SliceCount,
			MemorySizeMB:              gi.MemorySizeMB,
		}, nvml.SUCCESS
	}
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		if st.isLost(gpu) {
			return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
		}
		return nvml.Memory{Total: gi.MemorySizeMB << 20, Free: gi.MemorySizeMB << 20}, nvml.SUCCESS
	}
	return d
}
