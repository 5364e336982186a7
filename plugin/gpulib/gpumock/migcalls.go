package gpumock

// The NVML MIG calls of the mock (mig.go holds the state they read and change): MIG mode,
// GPU instances at NVML's placements with each profile's instance count, compute instances
// within a GPU instance's slices, and handles that answer from the current state.

import (
	"cmp"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

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
	h.GetComputeInstanceByIdFunc = func(ciID int) (nvml.ComputeInstance, nvml.Return) {
		found := false
		ret := st.read(func(s *migState) {
			if gi := lookup(s); gi != nil {
				found = slices.ContainsFunc(gi.CIs, func(ci ciMock) bool { return ci.ID == ciID })
			}
		})
		if ret == nvml.SUCCESS && !found {
			ret = nvml.ERROR_NOT_FOUND
		}
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		return st.computeInstance(i, id, ciID, h), nvml.SUCCESS
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
