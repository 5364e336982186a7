package migmanager

import (
	"context"
	"slices"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/exporter/podresources"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib"
)

// PodResourceHolders names, for each GPU, the pods the kubelet's pod-resources API says hold
// it: the GPU itself (by UUID or index) or one of its MIG devices, through the device plugin or
// a DRA claim. The exporter's client is
// reused, refreshed on every call, so the answer is the kubelet's at the time of the change.
func PodResourceHolders(lib nvml.Interface, c *podresources.Client) func(context.Context) (Holders, error) {
	return func(ctx context.Context) (Holders, error) {
		if err := c.Refresh(ctx); err != nil {
			return nil, err
		}
		return holdersOf(lib, c.Mapping().Lookup)
	}
}

func holdersOf(lib nvml.Interface, lookup func(id string) []podresources.PodRef) (Holders, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, &NVMLError{GPU: -1, Call: "DeviceGetCount", Ret: ret}
	}
	out := Holders{}
	for i := range n {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, &NVMLError{GPU: i, Call: "DeviceGetHandleByIndex", Ret: ret}
		}
		ids := []string{strconv.Itoa(i)}
		if u, ret := dev.GetUUID(); ret == nvml.SUCCESS {
			ids = append(ids, u)
		}
		if mode, _, ret := dev.GetMigMode(); ret == nvml.SUCCESS && mode == nvml.DEVICE_MIG_ENABLE {
			// A MIG device whose holder cannot be looked up could be repartitioned under a pod.
			handles, call, ret := gpulib.MIGHandles(dev)
			if ret != nvml.SUCCESS {
				return nil, &NVMLError{GPU: i, Call: call, Ret: ret}
			}
			for _, md := range handles {
				if u, ret := md.GetUUID(); ret == nvml.SUCCESS {
					ids = append(ids, u)
				}
				// A MIG device held through a DRA claim is keyed by its GPU instance.
				if gi, ret := md.GetGpuInstanceId(); ret == nvml.SUCCESS {
					ids = append(ids, podresources.MIGKey(i, gi))
				}
			}
		}
		var pods []string
		for _, id := range ids {
			for _, ref := range lookup(id) {
				if p := ref.Namespace + "/" + ref.Pod; !slices.Contains(pods, p) {
					pods = append(pods, p)
				}
			}
		}
		if len(pods) > 0 {
			slices.Sort(pods)
			out[i] = pods
		}
	}
	return out, nil
}
