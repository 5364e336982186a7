package migmanager

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/plugin/agent/hostfs"
	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib"
)

// applied is the content of config.MIGAppliedFile: what the toolkit stage's CDI spec must
// name after this layout.
type applied struct {
	Layout     string   `json:"layout"`
	MIGDevices []string `json:"migDevices"`
}

// migUUIDs lists every MIG device's UUID, GPU by GPU.
func migUUIDs(lib nvml.Interface) ([]string, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, &NVMLError{GPU: -1, Call: "DeviceGetCount", Ret: ret}
	}
	var out []string
	for i := range n {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, &NVMLError{GPU: i, Call: "DeviceGetHandleByIndex", Ret: ret}
		}
		if mode, _, ret := dev.GetMigMode(); ret != nvml.SUCCESS || mode != nvml.DEVICE_MIG_ENABLE {
			continue
		}
		// A slot NVML does not answer would leave its MIG device out of the CDI spec: an error.
		handles, call, ret := gpulib.MIGHandles(dev)
		if ret != nvml.SUCCESS {
			return nil, &NVMLError{GPU: i, Call: call, Ret: ret}
		}
		for _, md := range handles {
			if u, ret := md.GetUUID(); ret == nvml.SUCCESS {
				out = append(out, u)
			}
		}
	}
	return out, nil
}

// recordApplied writes config.MIGAppliedFile under hostRoot (only when its bytes change, so a
// settled node wakes the toolkit stage never).
func recordApplied(hostRoot, layout string, uuids []string) error {
	b, _ := json.Marshal(applied{Layout: layout, MIGDevices: uuids})
	_, err := hostfs.Writer{}.WriteOwned(hostRoot, config.MIGAppliedFile, append(b, '\n'), 0o644)
	return err
}

// cdiMissing lists the MIG UUIDs the node's CDI spec (config.CDISpecFile) does not name yet.
func cdiMissing(hostRoot string, uuids []string) ([]string, error) {
	b, err := hostfs.ReadFile(hostRoot, config.CDISpecFile)
	if errors.Is(err, fs.ErrNotExist) {
		return uuids, nil
	}
	if err != nil {
		return nil, err
	}
	var spec struct {
		Devices []struct {
			Name string `json:"name"`
		} `json:"devices"`
	}
	if err := yaml.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("CDI spec %s: %w", config.CDISpecFile, err)
	}
	var missing []string
	for _, u := range uuids {
		if !slices.ContainsFunc(spec.Devices, func(d struct {
			Name string `json:"name"`
		}) bool {
			return d.Name == u
		}) {
			missing = append(missing, u)
		}
	}
	return missing, nil
}

func shortList(xs []string) string {
	if len(xs) > 3 {
		return strings.Join(xs[:3], ", ") + fmt.Sprintf(" and %d more", len(xs)-3)
	}
	return strings.Join(xs, ", ")
}
