package draplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// cdiSpecs writes and removes the one CDI spec per prepared claim. A claim's devices are named
// <claim UID>-<device>, unique forever, so a runtime's CDI cache never serves a stale one.
type cdiSpecs struct {
	dir      string // the host's CDI directory (containerd reads it), e.g. /var/run/cdi
	hostRoot string // where the host's / is mounted: its /dev tells which device nodes exist
}

// nvidiaControlNodes are the driver's device nodes every GPU user needs besides its own.
var nvidiaControlNodes = []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}

func (c cdiSpecs) path(claim types.UID) string {
	return filepath.Join(c.dir, config.DRAClaimCDIFilePrefix+string(claim)+".json")
}

// deviceID is the CDI device a container of the claim gets for one of its devices.
func deviceID(claim types.UID, device string) string {
	return config.DRAClaimCDIKind + "=" + string(claim) + "-" + device
}

// write puts the claim's spec in place atomically (a runtime may read it any moment) and
// returns the CDI device ids per device name. Every device sets NVIDIA_VISIBLE_DEVICES to all
// of the claim's UUIDs (the nvidia runtime injects them), adds the device nodes the host has
// for it, and refers to the node's own spec (nvidia.com/gpu=<uuid>, installed by the toolkit
// stage) when that exists, for the driver's libraries.
func (c cdiSpecs) write(claim types.UID, devs []Device) (map[string][]string, error) {
	uuids := make([]string, 0, len(devs))
	for _, d := range devs {
		uuids = append(uuids, d.UUID)
	}
	spec := cdispec.Spec{
		Kind:           config.DRAClaimCDIKind,
		Annotations:    map[string]string{"gpupolicy.dev/claim-uid": string(claim)},
		ContainerEdits: cdispec.ContainerEdits{Env: []string{"NVIDIA_VISIBLE_DEVICES=" + strings.Join(uuids, ",")}},
	}
	for _, n := range nvidiaControlNodes {
		if c.exists(n) {
			spec.ContainerEdits.DeviceNodes = append(spec.ContainerEdits.DeviceNodes, &cdispec.DeviceNode{Path: n, HostPath: n})
		}
	}
	_, err := os.Stat(filepath.Join(c.dir, filepath.Base(config.CDISpecFile)))
	nodeSpec := err == nil
	ids := map[string][]string{}
	for _, d := range devs {
		dev := cdispec.Device{Name: string(claim) + "-" + d.Name, Annotations: map[string]string{"gpupolicy.dev/device": d.Name}}
		if d.Minor >= 0 {
			if n := fmt.Sprintf("/dev/nvidia%d", d.Minor); c.exists(n) {
				dev.ContainerEdits.DeviceNodes = append(dev.ContainerEdits.DeviceNodes, &cdispec.DeviceNode{Path: n, HostPath: n})
			}
		}
		if len(dev.ContainerEdits.DeviceNodes) == 0 {
			// A device entry needs at least one edit; the env is what the runtime acts on.
			dev.ContainerEdits.Env = []string{"GPUPOLICY_DRA_DEVICE_" + strings.ToUpper(strings.ReplaceAll(d.Name, "-", "_")) + "=" + d.UUID}
		}
		spec.Devices = append(spec.Devices, dev)
		ids[d.Name] = []string{deviceID(claim, d.Name)}
		if nodeSpec {
			ids[d.Name] = append(ids[d.Name], config.CDIKind+"="+d.UUID)
		}
	}
	v, err := cdispec.MinimumRequiredVersion(&spec)
	if err != nil {
		return nil, fmt.Errorf("CDI spec for claim %s: %w", claim, err)
	}
	spec.Version = v
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(c.dir, ".tmp-"+config.DRAClaimCDIFilePrefix+"*")
	if err != nil {
		return nil, fmt.Errorf("CDI directory %s: %w (mount the host's CDI directory there)", c.dir, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp.Name(), c.path(claim)); err != nil {
		return nil, err
	}
	return ids, nil
}

// remove deletes the claim's spec; a spec that is not there is already unprepared.
func (c cdiSpecs) remove(claim types.UID) error {
	if err := os.Remove(c.path(claim)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// prepared reads back which devices each claim with a spec in the directory holds, so a
// restarted plugin still refuses to hand a device to a second claim.
func (c cdiSpecs) prepared() (map[types.UID][]string, error) {
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return nil, err
	}
	out := map[types.UID][]string{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, config.DRAClaimCDIFilePrefix) || !strings.HasSuffix(name, ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(c.dir, name))
		if err != nil {
			return nil, err
		}
		var spec cdispec.Spec
		if err := json.Unmarshal(b, &spec); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		uid := types.UID(strings.TrimSuffix(strings.TrimPrefix(name, config.DRAClaimCDIFilePrefix), ".json"))
		for _, d := range spec.Devices {
			out[uid] = append(out[uid], d.Annotations["gpupolicy.dev/device"])
		}
		slices.Sort(out[uid])
	}
	return out, nil
}

func (c cdiSpecs) exists(hostPath string) bool {
	_, err := os.Stat(filepath.Join(c.hostRoot, hostPath))
	return err == nil
}
