package server

import (
	"context"
	"slices"
	"sort"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/devices"
)

// Names the container runtime understands.
const (
	// VisibleDevicesEnv is read by the NVIDIA container runtime's legacy (env-var) mode.
	VisibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES"
	// visibleNone keeps the legacy hook from injecting anything. CUDA base images set
	// NVIDIA_VISIBLE_DEVICES=all; under cdi-cri that default would expose every GPU.
	visibleNone = "void"
	// MPSPipeDirEnv tells CUDA where the MPS control daemon's pipes are.
	MPSPipeDirEnv = "CUDA_MPS_PIPE_DIRECTORY"
)

// Allocate answers, per container, which devices the runtime must inject: CDI device names
// (cdi-cri) or NVIDIA_VISIBLE_DEVICES (envvar). Replicas of one GPU collapse into that GPU.
func (p *Plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{ContainerResponses: make([]*pluginapi.ContainerAllocateResponse, 0, len(req.ContainerRequests))}
	for _, creq := range req.ContainerRequests {
		uuids, err := p.uuidsOf(creq.DevicesIds)
		if err != nil {
			return nil, err
		}
		if p.opts.MPS != nil && len(creq.DevicesIds) > 1 {
			// k8s-device-plugin v0.17.4 refuses it under MPS whatever failRequestsGreaterThanOne
			// says: the daemon's limits are per client, and a client is one replica.
			return nil, status.Errorf(codes.InvalidArgument, "resource %s is shared with MPS: a container may request 1, not %d (each replica is one MPS client with its share of the GPU)", p.res.Name, len(creq.DevicesIds))
		}
		cresp := &pluginapi.ContainerAllocateResponse{}
		switch p.opts.DeviceListStrategy {
		case config.DeviceListEnvVar:
			cresp.Envs = map[string]string{VisibleDevicesEnv: strings.Join(uuids, ",")}
		default:
			cresp.Envs = map[string]string{VisibleDevicesEnv: visibleNone}
			cresp.CdiDevices = make([]*pluginapi.CDIDevice, 0, len(uuids))
			for _, u := range uuids {
				cresp.CdiDevices = append(cresp.CdiDevices, &pluginapi.CDIDevice{Name: config.CDIKind + "=" + u})
			}
		}
		if m := p.opts.MPS; m != nil {
			pipe := config.MPSPipeDir(config.MPSContainerRoot, p.res.Name)
			cresp.Envs[MPSPipeDirEnv] = pipe
			cresp.Mounts = append(cresp.Mounts,
				&pluginapi.Mount{ContainerPath: pipe, HostPath: config.MPSPipeDir(m.HostRoot, p.res.Name)},
				&pluginapi.Mount{ContainerPath: "/dev/shm", HostPath: config.MPSShmDir(m.HostRoot)})
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cresp)
	}
	return resp, nil
}

// uuidsOf maps device ids to their distinct UUIDs, in request order.
func (p *Plugin) uuidsOf(ids []string) ([]string, error) {
	uuids := make([]string, 0, len(ids))
	for _, id := range ids {
		d, ok := p.byID[id]
		if !ok {
			return nil, status.Errorf(codes.InvalidArgument, "resource %s has no device %q", p.res.Name, id)
		}
		if !slices.Contains(uuids, d.UUID) {
			uuids = append(uuids, d.UUID)
		}
	}
	return uuids, nil
}

// GetPreferredAllocation picks, per container, the devices to give: the must-include ones plus
// the best of the available healthy ones. Unknown or unhealthy available devices are skipped,
// never an error, so one lost GPU does not break allocation for the rest of the node; when too
// few remain the answer is shorter and the kubelet fills the rest.
func (p *Plugin) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, creq := range req.ContainerRequests {
		ids := p.preferred(creq.AvailableDeviceIDs, creq.MustIncludeDeviceIDs, int(creq.AllocationSize))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

func (p *Plugin) preferred(available, must []string, size int) []string {
	inMust := map[string]bool{}
	for _, id := range must {
		inMust[id] = true
	}
	var usable []devices.Device
	for _, id := range available {
		d, ok := p.byID[id]
		switch {
		case inMust[id]:
		case !ok:
			p.log.Warn("preferred allocation: skipping unknown device", "device", id)
		case !p.healthy(d.UUID):
			p.log.Info("preferred allocation: skipping unhealthy device", "device", id)
		default:
			usable = append(usable, d)
		}
	}
	// Kubelet order is a map's order; sort so equal requests get equal answers.
	sort.Slice(usable, func(a, b int) bool { return p.pos[usable[a].ID] < p.pos[usable[b].ID] })
	need := size - len(must)
	if need <= 0 {
		return append([]string(nil), must...)
	}
	switch {
	case p.replicated:
		return append(append([]string(nil), must...), spreadReplicas(usable, must, need)...)
	case !p.res.MIG && p.opts.Graph != nil:
		return p.byTopology(usable, must, size)
	default:
		out := append([]string(nil), must...)
		for _, d := range usable[:min(need, len(usable))] {
			out = append(out, d.ID)
		}
		return out
	}
}

// byTopology chooses whole GPUs with the topology graph (ids are UUIDs, one per GPU).
func (p *Plugin) byTopology(usable []devices.Device, must []string, size int) []string {
	idOf := map[int]string{}
	var avail, mustIdx []int
	for _, d := range usable {
		avail = append(avail, d.GPU)
		idOf[d.GPU] = d.ID
	}
	for _, id := range must {
		if d, ok := p.byID[id]; ok {
			mustIdx = append(mustIdx, d.GPU)
			idOf[d.GPU] = id
		}
	}
	out := append([]string(nil), must...)
	// Must-include ids this resource does not know still count against size.
	for _, gpu := range p.opts.Graph.Best(avail, mustIdx, size-len(must)+len(mustIdx))[len(mustIdx):] {
		out = append(out, idOf[gpu])
	}
	return out
}

// spreadReplicas takes replicas from the GPUs with the most free replicas first (the least
// shared ones), one per GPU per round, skipping the GPUs of must in the first round.
func spreadReplicas(usable []devices.Device, must []string, need int) []string {
	type group struct {
		uuid string
		ids  []string
	}
	var groups []*group
	byUUID := map[string]*group{}
	for _, d := range usable {
		g := byUUID[d.UUID]
		if g == nil {
			g = &group{uuid: d.UUID}
			byUUID[d.UUID] = g
			groups = append(groups, g)
		}
		g.ids = append(g.ids, d.ID)
	}
	taken := map[string]bool{}
	for _, id := range must {
		taken[devices.UUIDOf(id)] = true
	}
	sort.SliceStable(groups, func(a, b int) bool {
		if taken[groups[a].uuid] != taken[groups[b].uuid] {
			return !taken[groups[a].uuid]
		}
		return len(groups[a].ids) > len(groups[b].ids)
	})
	var out []string
	for round := 0; len(out) < need; round++ {
		progress := false
		for _, g := range groups {
			if round < len(g.ids) && len(out) < need {
				out = append(out, g.ids[round])
				progress = true
			}
		}
		if !progress {
			break
		}
	}
	return out
}
