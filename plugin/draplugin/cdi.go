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
	"sigs.k8s.io/yaml"
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
// returns the CDI device ids per device name. Each device's edits are its own: its device node
// here, and its driver files through the node spec's nvidia.com/gpu=<uuid> (installed by the
// toolkit stage), the second id of each device. The kubelet hands a container only the ids of
// the devices of the requests it references, so a container that uses one request of a claim
// sees that request's GPUs and no other. The claim-wide edits hold only what names no GPU: the
// driver's control nodes, and NVIDIA_VISIBLE_DEVICES=void, which keeps nvidia-container-runtime
// from injecting GPUs of its own (an image's NVIDIA_VISIBLE_DEVICES=all included), as NVIDIA's
// DRA driver does.
func (c cdiSpecs) write(claim types.UID, devs []Device, sharing map[string]cdispec.ContainerEdits, rec sharingRecord) (map[string][]string, error) {
	node, err := c.nodeDevices()
	if err != nil {
		return nil, err
	}
	for _, d := range devs {
		if !node[d.UUID] {
			return nil, fmt.Errorf("the node's CDI spec %s has no device %s=%s for %s: its containers would start without the driver's files; the toolkit stage (toolkit.cdi: true) writes that spec when the node's GPUs are verified, so wait for it or check its status", c.nodeSpecPath(), config.CDIKind, d.UUID, d.Name)
		}
	}
	spec := cdispec.Spec{
		Kind:           config.DRAClaimCDIKind,
		Annotations:    map[string]string{"gpupolicy.dev/claim-uid": string(claim)},
		ContainerEdits: cdispec.ContainerEdits{Env: []string{"NVIDIA_VISIBLE_DEVICES=void"}},
	}
	for _, n := range nvidiaControlNodes {
		if c.exists(n) {
			spec.ContainerEdits.DeviceNodes = append(spec.ContainerEdits.DeviceNodes, &cdispec.DeviceNode{Path: n, HostPath: n})
		}
	}
	ids := map[string][]string{}
	for _, d := range devs {
		dev := cdispec.Device{Name: string(claim) + "-" + d.Name, Annotations: map[string]string{"gpupolicy.dev/device": d.Name}}
		if d.Minor >= 0 {
			if n := fmt.Sprintf("/dev/nvidia%d", d.Minor); c.exists(n) {
				dev.ContainerEdits.DeviceNodes = append(dev.ContainerEdits.DeviceNodes, &cdispec.DeviceNode{Path: n, HostPath: n})
			}
		}
		// Which GPU this is, for the container's own programs and for a person: an edit of this
		// device alone (a device entry needs at least one edit).
		dev.ContainerEdits.Env = []string{"GPUPOLICY_DRA_DEVICE_" + strings.ToUpper(strings.ReplaceAll(d.Name, "-", "_")) + "=" + d.UUID}
		if e, ok := sharing[d.Name]; ok { // the device's MPS daemon: its pipe and shared memory
			dev.ContainerEdits.Env = append(dev.ContainerEdits.Env, e.Env...)
			dev.ContainerEdits.Mounts = append(dev.ContainerEdits.Mounts, e.Mounts...)
		}
		spec.Devices = append(spec.Devices, dev)
		ids[d.Name] = []string{deviceID(claim, d.Name), config.CDIKind + "=" + d.UUID}
	}
	if !rec.empty() {
		spec.Annotations[annotationSharing] = rec.annotation()
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

func (c cdiSpecs) nodeSpecPath() string {
	return filepath.Join(c.dir, filepath.Base(config.CDISpecFile))
}

// nodeDevices are the device names of the node's CDI spec (nvidia-ctk cdi generate, one device
// per GPU UUID, kind nvidia.com/gpu); missing, the error says where it comes from.
func (c cdiSpecs) nodeDevices() (map[string]bool, error) {
	b, err := os.ReadFile(c.nodeSpecPath())
	if err != nil {
		return nil, fmt.Errorf("the node's CDI spec: %w (the toolkit stage writes it when toolkit.cdi is true; DRA claims take each GPU's driver files from it)", err)
	}
	var spec cdispec.Spec
	if err := yaml.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("the node's CDI spec %s: %w", c.nodeSpecPath(), err)
	}
	if spec.Kind != config.CDIKind {
		return nil, fmt.Errorf("the node's CDI spec %s is of kind %q, want %s", c.nodeSpecPath(), spec.Kind, config.CDIKind)
	}
	names := map[string]bool{}
	for _, d := range spec.Devices {
		names[d.Name] = true
	}
	return names, nil
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

// read is the claim's spec as written; a missing one is an error wrapping fs.ErrNotExist.
func (c cdiSpecs) read(claim types.UID) (cdispec.Spec, error) {
	var spec cdispec.Spec
	b, err := os.ReadFile(c.path(claim))
	if err != nil {
		return spec, err
	}
	return spec, json.Unmarshal(b, &spec)
}

// sharing is what the claim's preparation changed on its GPUs (none when it has no spec).
func (c cdiSpecs) sharing(claim types.UID) (sharingRecord, error) {
	var rec sharingRecord
	spec, err := c.read(claim)
	if errors.Is(err, fs.ErrNotExist) {
		return rec, nil
	}
	if err != nil {
		return rec, err
	}
	if a := spec.Annotations[annotationSharing]; a != "" {
		if err := json.Unmarshal([]byte(a), &rec); err != nil {
			return rec, fmt.Errorf("%s: annotation %s: %w", c.path(claim), annotationSharing, err)
		}
	}
	return rec, nil
}

// ids are the CDI device ids of a prepared claim, per device name, as write returned them.
func (c cdiSpecs) ids(claim types.UID) (map[string][]string, error) {
	spec, err := c.read(claim)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, d := range spec.Devices {
		name := d.Annotations["gpupolicy.dev/device"]
		var uuid string
		for _, e := range d.ContainerEdits.Env {
			if _, v, ok := strings.Cut(e, "="); ok && strings.HasPrefix(e, "GPUPOLICY_DRA_DEVICE_") {
				uuid = v
			}
		}
		out[name] = []string{deviceID(claim, name), config.CDIKind + "=" + uuid}
	}
	return out, nil
}
