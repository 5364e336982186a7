package migmanager

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/mig"
)

// ProductError is a layout checked for one GPU model meeting GPUs of another: the pool's
// gpuProduct does not match this node, and no GPU is changed.
type ProductError struct {
	Want  string         // the pool's gpuProduct
	Found map[int]string // GPU index → its product label, for the GPUs that differ
}

func (e *ProductError) Error() string {
	byModel := map[string][]int{}
	for _, i := range slices.Sorted(maps.Keys(e.Found)) {
		byModel[e.Found[i]] = append(byModel[e.Found[i]], i)
	}
	var gpus []string
	for _, model := range slices.Sorted(maps.Keys(byModel)) {
		if ids := byModel[model]; len(ids) == 1 {
			gpus = append(gpus, fmt.Sprintf("GPU %d is %s", ids[0], model))
		} else {
			gpus = append(gpus, fmt.Sprintf("GPUs %s are %s", joinInts(ids), model))
		}
	}
	return fmt.Sprintf("the pool's layouts were checked for %s (its gpuProduct), but %s: no GPU was changed; "+
		"set the pool's gpuProduct to this node's model and check its layouts against it, or keep this node out of the pool (nodeSelector on %s)",
		e.Want, strings.Join(gpus, ", "), config.LabelGPUProduct)
}

// checkProduct compares the model of every GPU the layout covers with product, by the
// product label NVML's device name gives (config.ProductLabel).
func checkProduct(lib nvml.Interface, layout []mig.DeviceConfig, product string) error {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return &NVMLError{GPU: -1, Call: "DeviceGetCount", Ret: ret}
	}
	found := map[int]string{}
	for i := range n {
		if _, ok := mig.ForGPU(layout, i); !ok {
			continue
		}
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return &NVMLError{GPU: i, Call: "DeviceGetHandleByIndex", Ret: ret}
		}
		name, ret := dev.GetName()
		if ret != nvml.SUCCESS {
			return &NVMLError{GPU: i, Call: "DeviceGetName", Ret: ret}
		}
		if got := config.ProductLabel(name); got != product {
			found[i] = got
		}
	}
	if len(found) > 0 {
		return &ProductError{Want: product, Found: found}
	}
	return nil
}
