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
	"cmp"
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
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
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

// fillMIG installs the MIG calls on GPU i.
func (st *deviceState) fillMIG(i int, d *server.Device) {
	profiles := d.Config.MIGProfiles
	d.GetMigModeFunc = func() (int, int, nvml.Return) {
		var cur, pending int
		ret := st.read(func(s *migState) { cur, pending = s.GPUs[i].Mode, s.GPUs[i].Pending })
		return cur, pending, ret
	}
	d.SetMigModeFunc = func(mode int) (nvml.Return, nvml.Return) {
		if mode != nvml.DEVICE_MIG_ENABLE && mode != nvml.DEVICE_MIG_DISABLE {
			return nvml.ERROR_INVALID_ARGUMENT, nvml.ERROR_INVALID_ARGUMENT
		}
		activation := nvml.SUCCESS
		ret := st.change(func(s *migState) nvml.Return {
			g := &s.GPUs[i]
			if len(g.GIs) > 0 {
				return nvml.ERROR_IN_USE // instances must be destroyed first
			}
			g.Pending = mode
			if g.ResetRequired && g.Mode != mode {
				activation = nvml.ERROR_RESET_REQUIRED
				return nvml.SUCCESS
			}
			g.Mode = mode
			return nvml.SUCCESS
		})
		return activation, ret
	}
	d.GetGpuInstancePossiblePlacementsFunc = func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
		if info == nil {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		p, ok := profiles.GpuInstancePlacements[int(info.Id)]
		if !ok {
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
		return slices.Clone(p), nvml.SUCCESS
	}
	d.GetGpuInstanceRemainingCapacityFunc = func(info *nvml.GpuInstanceProfileInfo) (int, nvml.Return) {
		if info == nil {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		n := 0
		ret := st.read(func(s *migState) { n = remaining(s.GPUs[i], profiles, int(info.Id)) })
		return n, ret
	}
	create := func(info *nvml.GpuInstanceProfileInfo, at *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		if info == nil {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		id := int(info.Id)
		pinfo, ok := profiles.GpuInstanceProfiles[id]
		if !ok {
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
		var made int
		ret := st.change(func(s *migState) nvml.Return {
			g := &s.GPUs[i]
			if g.Mode != nvml.DEVICE_MIG_ENABLE {
				return nvml.ERROR_NOT_SUPPORTED // MIG mode is off (or only pending)
			}
			if count(g, id) >= int(pinfo.InstanceCount) {
				return nvml.ERROR_INSUFFICIENT_RESOURCES
			}
			var pl nvml.GpuInstancePlacement
			if at != nil {
				if !slices.Contains(profiles.GpuInstancePlacements[id], *at) {
					return nvml.ERROR_INVALID_ARGUMENT // not a placement of this profile
				}
				if !free(g, *at) {
					return nvml.ERROR_INSUFFICIENT_RESOURCES
				}
				pl = *at
			} else {
				i := slices.IndexFunc(profiles.GpuInstancePlacements[id], func(p nvml.GpuInstancePlacement) bool { return free(g, p) })
				if i < 0 {
					return nvml.ERROR_INSUFFICIENT_RESOURCES
				}
				pl = profiles.GpuInstancePlacements[id][i]
			}
			made = unusedID(len(g.GIs), func(k int) int { return g.GIs[k].ID })
			g.GIs = append(g.GIs, giMock{ID: made, Profile: id, Start: int(pl.Start), Size: int(pl.Size)})
			slices.SortFunc(g.GIs, func(a, b giMock) int { return cmp.Compare(a.ID, b.ID) })
			return nvml.SUCCESS
		})
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		return st.gpuInstance(i, made), nvml.SUCCESS
	}
	d.CreateGpuInstanceFunc = func(info *nvml.GpuInstanceProfileInfo) (nvml.GpuInstance, nvml.Return) {
		return create(info, nil)
	}
	d.CreateGpuInstanceWithPlacementFunc = func(info *nvml.GpuInstanceProfileInfo, at *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		if at == nil {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return create(info, at)
	}
	d.GetGpuInstancesFunc = func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
		if info == nil {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		var ids []int
		ret := st.read(func(s *migState) {
			for _, gi := range s.GPUs[i].GIs {
				if gi.Profile == int(info.Id) {
					ids = append(ids, gi.ID)
				}
			}
		})
		out := make([]nvml.GpuInstance, len(ids))
		for k, id := range ids {
			out[k] = st.gpuInstance(i, id)
		}
		return out, ret
	}
	d.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		found := false
		ret := st.read(func(s *migState) {
			found = slices.ContainsFunc(s.GPUs[i].GIs, func(g giMock) bool { return g.ID == id })
		})
		if ret == nvml.SUCCESS && !found {
			ret = nvml.ERROR_NOT_FOUND
		}
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		return st.gpuInstance(i, id), nvml.SUCCESS
	}
}

// gpuInstance is a handle of GPU instance id on GPU i; it answers from the current state, so
// a handle of a destroyed instance answers ERROR_NOT_FOUND.
func (st *deviceState) gpuInstance(i, id int) nvml.GpuInstance {
	d := st.gpus[i]
	profiles := d.Config.MIGProfiles
	h := &mock.GpuInstance{}
	// lookup runs f on the instance, or answers ERROR_NOT_FOUND when it is gone.
	lookup := func(s *migState) *giMock {
		g := &s.GPUs[i]
		k := slices.IndexFunc(g.GIs, func(gi giMock) bool { return gi.ID == id })
		if k < 0 {
			return nil
		}
		return &g.GIs[k]
	}
	h.GetInfoFunc = func() (nvml.GpuInstanceInfo, nvml.Return) {
		var info nvml.GpuInstanceInfo
		ret := st.read(func(s *migState) {
			if gi := lookup(s); gi != nil {
				info = nvml.GpuInstanceInfo{Device: d, Id: uint32(gi.ID), ProfileId: uint32(gi.Profile),
					Placement: nvml.GpuInstancePlacement{Start: uint32(gi.Start), Size: uint32(gi.Size)}}
			}
		})
		if ret == nvml.SUCCESS && info.Device == nil {
			ret = nvml.ERROR_NOT_FOUND
		}
		return info, ret
	}
	giProfile := func() (int, nvml.Return) {
		p := -1
		ret := st.read(func(s *migState) {
			if gi := lookup(s); gi != nil {
				p = gi.Profile
			}
		})
		if ret == nvml.SUCCESS && p < 0 {
			ret = nvml.ERROR_NOT_FOUND
		}
		return p, ret
	}
	h.GetComputeInstanceProfileInfoFunc = func(ciProfile, engine int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
		p, ret := giProfile()
		if ret != nvml.SUCCESS {
			return nvml.ComputeInstanceProfileInfo{}, ret
		}
		if engine != nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED {
			return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		info, ok := profiles.ComputeInstanceProfiles[p][ciProfile]
		if !ok {
			return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return info, nvml.SUCCESS
	}
	h.CreateComputeInstanceFunc = func(info *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
		if info == nil {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		made := -1
		ret := st.change(func(s *migState) nvml.Return {
			gi := lookup(s)
			if gi == nil {
				return nvml.ERROR_NOT_FOUND
			}
			cp, ok := profiles.ComputeInstanceProfiles[gi.Profile][int(info.Id)]
			if !ok {
				return nvml.ERROR_NOT_SUPPORTED
			}
			used := 0
			for _, ci := range gi.CIs {
				used += int(profiles.ComputeInstanceProfiles[gi.Profile][ci.Profile].SliceCount)
			}
			if used+int(cp.SliceCount) > int(profiles.GpuInstanceProfiles[gi.Profile].SliceCount) {
				return nvml.ERROR_INSUFFICIENT_RESOURCES
			}
			made = unusedID(len(gi.CIs), func(k int) int { return gi.CIs[k].ID })
			gi.CIs = append(gi.CIs, ciMock{ID: made, Profile: int(info.Id)})
			slices.SortFunc(gi.CIs, func(a, b ciMock) int { return cmp.Compare(a.ID, b.ID) })
			return nvml.SUCCESS
		})
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		return st.computeInstance(i, id, made, h), nvml.SUCCESS
	}
	h.GetComputeInstancesFunc = func(info *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, nvml.Return) {
		if info == nil {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		var ids []int
		found := false
		ret := st.read(func(s *migState) {
			if gi := lookup(s); gi != nil {
				found = true
				for _, ci := range gi.CIs {
					if ci.Profile == int(info.Id) {
						ids = append(ids, ci.ID)
					}
				}
			}
		})
		if ret == nvml.SUCCESS && !found {
			ret = nvml.ERROR_NOT_FOUND
		}
		out := make([]nvml.ComputeInstance, len(ids))
		for k, ci := range ids {
			out[k] = st.computeInstance(i, id, ci, h)
		}
		return out, ret
	}
	h.DestroyFunc = func() nvml.Return {
		return st.change(func(s *migState) nvml.Return {
			g := &s.GPUs[i]
			k := slices.IndexFunc(g.GIs, func(gi giMock) bool { return gi.ID == id })
			switch {
			case k < 0:
				return nvml.ERROR_NOT_FOUND
			case len(g.GIs[k].CIs) > 0:
				return nvml.ERROR_IN_USE // compute instances must be destroyed first
			}
			g.GIs = slices.Delete(g.GIs, k, k+1)
			return nvml.SUCCESS
		})
	}
	return h
}

func (st *deviceState) computeInstance(i, giID, ciID int, gi nvml.GpuInstance) nvml.ComputeInstance {
	h := &mock.ComputeInstance{}
	h.GetInfoFunc = func() (nvml.ComputeInstanceInfo, nvml.Return) {
		var info nvml.ComputeInstanceInfo
		found := false
		ret := st.read(func(s *migState) {
			for _, g := range s.GPUs[i].GIs {
				for _, ci := range g.CIs {
					if g.ID == giID && ci.ID == ciID {
						found = true
						info = nvml.ComputeInstanceInfo{Device: st.gpus[i], GpuInstance: gi, Id: uint32(ci.ID), ProfileId: uint32(ci.Profile)}
					}
				}
			}
		})
		if ret == nvml.SUCCESS && !found {
			ret = nvml.ERROR_NOT_FOUND
		}
		return info, ret
	}
	h.DestroyFunc = func() nvml.Return {
		return st.change(func(s *migState) nvml.Return {
			g := &s.GPUs[i]
			k := slices.IndexFunc(g.GIs, func(gi giMock) bool { return gi.ID == giID })
			if k < 0 {
				return nvml.ERROR_NOT_FOUND
			}
			c := slices.IndexFunc(g.GIs[k].CIs, func(ci ciMock) bool { return ci.ID == ciID })
			if c < 0 {
				return nvml.ERROR_NOT_FOUND
			}
			g.GIs[k].CIs = slices.Delete(g.GIs[k].CIs, c, c+1)
			return nvml.SUCCESS
		})
	}
	return h
}

// unusedID is the smallest id ≥ 0 that none of the n existing ids (by index) uses, so a GPU
// configured the same way twice gets the same ids, and the same MIG UUIDs.
func unusedID(n int, idOf func(int) int) int {
	for id := 0; ; id++ {
		used := false
		for k := range n {
			if idOf(k) == id {
				used = true
				break
			}
		}
		if !used {
			return id
		}
	}
}

func count(g *gpuMIG, profile int) int {
	n := 0
	for _, gi := range g.GIs {
		if gi.Profile == profile {
			n++
		}
	}
	return n
}

// free reports whether placement p overlaps no GPU instance of g.
func free(g *gpuMIG, p nvml.GpuInstancePlacement) bool {
	for _, gi := range g.GIs {
		if int(p.Start) < gi.Start+gi.Size && gi.Start < int(p.Start+p.Size) {
			return false
		}
	}
	return true
}

// remaining is how many more instances of profile fit next to g's, one after another.
func remaining(g gpuMIG, profiles gpus.MIGProfileConfig, profile int) int {
	info, ok := profiles.GpuInstanceProfiles[profile]
	if !ok || g.Mode != nvml.DEVICE_MIG_ENABLE {
		return 0
	}
	n := 0
	sim := g
	sim.GIs = slices.Clone(g.GIs)
	for count(&sim, profile) < int(info.InstanceCount) {
		k := slices.IndexFunc(profiles.GpuInstancePlacements[profile], func(p nvml.GpuInstancePlacement) bool { return free(&sim, p) })
		if k < 0 {
			break
		}
		p := profiles.GpuInstancePlacements[profile][k]
		sim.GIs = append(sim.GIs, giMock{Profile: profile, Start: int(p.Start), Size: int(p.Size)})
		n++
	}
	return n
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
