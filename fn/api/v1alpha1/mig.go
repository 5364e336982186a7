package v1alpha1

import (
	"encoding/json"
	"fmt"
	"strconv"

	yaml "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MIGDevicesAll is the value of devices that means every GPU of the node.
const MIGDevicesAll = "all"

// MarshalJSON writes "all" or the list of indexes.
func (d MIGDevices) MarshalJSON() ([]byte, error) {
	if d.All {
		return json.Marshal(MIGDevicesAll)
	}
	if d.Indexes == nil {
		return []byte("[]"), nil
	}
	return json.Marshal(d.Indexes)
}

// UnmarshalJSON reads "all" or a list of indexes.
func (d *MIGDevices) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		if s != MIGDevicesAll {
			return fmt.Errorf("devices %q: write %q or a list of GPU indexes", s, MIGDevicesAll)
		}
		*d = MIGDevices{All: true}
		return nil
	}
	var idx []int
	if err := json.Unmarshal(b, &idx); err != nil {
		return fmt.Errorf("devices: write %q or a list of GPU indexes", MIGDevicesAll)
	}
	*d = MIGDevices{Indexes: idx}
	return nil
}

// maxGPUIndex bounds a GPU index in devices: NVML numbers a node's GPUs from 0, and no node
// holds more than a few dozen.
const maxGPUIndex = 255

// migDevices decodes devices strictly: the string "all" or a list of whole numbers.
func (d *decoder) migDevices(n *yaml.Node, out *MIGDevices, fp *field.Path) {
	switch {
	case n.Kind == yaml.ScalarNode && n.Tag == "!!str":
		if n.Value != MIGDevicesAll {
			d.add(field.Invalid(fp, n.Value, fmt.Sprintf("line %d: write %q or a list of GPU indexes, e.g. [0, 1]", n.Line, MIGDevicesAll)))
			return
		}
		*out = MIGDevices{All: true}
	case n.Kind == yaml.SequenceNode:
		if len(n.Content) > maxGPUIndex+1 {
			d.add(field.TooMany(fp, len(n.Content), maxGPUIndex+1))
			return
		}
		idx := make([]int, 0, len(n.Content))
		for i, item := range n.Content {
			for item.Kind == yaml.AliasNode {
				item = item.Alias
			}
			v, err := strconv.Atoi(item.Value)
			if item.Kind != yaml.ScalarNode || item.Tag != "!!int" || err != nil || v < 0 || v > maxGPUIndex {
				d.add(field.Invalid(fp.Index(i), item.Value, fmt.Sprintf("line %d: a GPU index is a whole number from 0 to %d", item.Line, maxGPUIndex)))
				continue
			}
			idx = append(idx, v)
		}
		*out = MIGDevices{Indexes: idx}
	default:
		d.add(typeError(fp, n, fmt.Sprintf("%q or a list of GPU indexes", MIGDevicesAll)))
	}
}
