package collector

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/gpulib"
)

// migStatic is what does not change while a MIG device exists; read once per MIG UUID.
type migStatic struct {
	giID, ciID int
	profile    string
}

// readMIGs lists the MIG devices of a MIG-enabled GPU with their framebuffer (and GPM metrics
// per GPU instance where supported). MIG layouts change at run time, so this runs every cycle;
// the per-device constants are cached by UUID.
func (c *Collector) readMIGs(g *gpuState) []MIG {
	mode, _, ret := g.dev.GetMigMode()
	if ret != nvml.SUCCESS || mode != nvml.DEVICE_MIG_ENABLE {
		if ret != nvml.SUCCESS && !unsupported(ret) {
			c.fail(g, "nvmlDeviceGetMigMode", ret)
		}
		g.dropMIGState(nil)
		return nil
	}
	// On a failed slot the devices before it are still reported, and no cached state is
	// dropped: the devices after it may well still exist.
	handles, call, ret := gpulib.MIGHandles(g.dev)
	complete := c.ok(g, call, ret)
	var out []MIG
	seen := map[string]bool{}
	for _, md := range handles {
		uuid, ret := md.GetUUID()
		if !c.ok(g, "nvmlDeviceGetUUID", ret) {
			continue
		}
		st, ok := g.migs[uuid]
		if !ok {
			if st, ok = c.readMIGStatic(g, md); !ok {
				continue
			}
			g.migs[uuid] = st
		}
		seen[uuid] = true
		m := MIG{UUID: uuid, GIID: st.giID, CIID: st.ciID, Profile: st.profile, Values: emptyValues()}
		tmp := m.Values
		if ret := readMemory(md, &tmp); ret == nvml.SUCCESS {
			m.Values = tmp
		} else if !unsupported(ret) {
			c.fail(g, "nvmlDeviceGetMemoryInfo_v2", ret)
		}
		c.sampleMIGGPM(g, st.giID, &m.Values)
		out = append(out, m)
	}
	if complete {
		g.dropMIGState(seen)
	}
	return out
}

func (c *Collector) readMIGStatic(g *gpuState, md nvml.Device) (migStatic, bool) {
	gi, ret := md.GetGpuInstanceId()
	if !c.ok(g, "nvmlDeviceGetGpuInstanceId", ret) {
		return migStatic{}, false
	}
	ci, ret := md.GetComputeInstanceId()
	if !c.ok(g, "nvmlDeviceGetComputeInstanceId", ret) {
		return migStatic{}, false
	}
	attrs, ret := md.GetAttributes()
	if !c.ok(g, "nvmlDeviceGetAttributes", ret) {
		return migStatic{}, false
	}
	return migStatic{giID: gi, ciID: ci, profile: gpulib.MIGProfileName(attrs)}, true
}

// sampleMIGGPM samples GPM for GPU instance gi (once per instance per cycle, shared by its
// compute instances) on a GPM-capable GPU.
func (c *Collector) sampleMIGGPM(g *gpuState, gi int, v *Values) {
	if !g.gpmSupported {
		return
	}
	if vals, ok := g.migGPMDone[gi]; ok {
		copyProf(v, &vals)
		return
	}
	s, ok := g.migGPM[gi]
	if !ok {
		var ret nvml.Return
		if s, ret = newGPMSampler(c.lib); !c.ok(g, "nvmlGpmSampleAlloc", ret) {
			return
		}
		g.migGPM[gi] = s
	}
	vals := emptyValues()
	take := func(smp nvml.GpmSample) nvml.Return { return g.dev.GpmMigSampleGet(gi, smp) }
	if call, ret := s.sample(c.lib, c.gpmBuf, take, &vals); ret != nvml.SUCCESS {
		c.ok(g, call, ret)
	}
	g.migGPMDone[gi] = vals
	copyProf(v, &vals)
}

func copyProf(dst, src *Values) {
	for _, m := range gpmMetrics {
		dst[m.field] = src[m.field]
	}
}

// dropMIGState forgets MIG devices not in seen (nil: all), freeing their GPM samples.
func (g *gpuState) dropMIGState(seen map[string]bool) {
	gis := map[int]bool{}
	for uuid, st := range g.migs {
		if seen[uuid] {
			gis[st.giID] = true
			continue
		}
		delete(g.migs, uuid)
	}
	for gi, s := range g.migGPM {
		if !gis[gi] {
			s.free()
			delete(g.migGPM, gi)
		}
	}
}
