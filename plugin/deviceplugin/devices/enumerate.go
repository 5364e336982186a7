// Package devices turns what NVML reports (GPUs, their MIG devices, PCI bus ids, NUMA nodes)
// into the device plugin's resources: which resource name advertises which device ids, under
// the policy's MIG strategy and time-slicing replicas.
package devices

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/gpulib"
)

// GPU is one physical GPU as NVML reports it.
type GPU struct {
	Index  int
	UUID   string
	Name   string
	BusID  string // sysfs form, lower case: "0000:07:00.0"
	NUMA   int    // -1 when unknown
	Handle nvml.Device
	// MIGEnabled is the current MIG mode; MIG lists its MIG devices (empty when none exist).
	MIGEnabled bool
	MIG        []MIG
}

// MIG is one MIG device (a compute instance) of a GPU.
type MIG struct {
	UUID    string
	Profile string // "1g.5gb", "1c.3g.20gb", ...
	GIID    int
	CIID    int
	Handle  nvml.Device
}

// Enumerate lists the GPUs NVML sees, with MIG devices and NUMA nodes. The NUMA node of a GPU
// is read from <hostRoot>/sys/bus/pci/devices/<bus id>/numa_node, the kernel's own answer;
// NVML's is used only when sysfs has none.
//
// One broken GPU does not stop the node: a GPU without a handle or UUID cannot be advertised
// and is skipped (reported in skipped); one whose other queries fail is kept, without MIG
// devices, and the health probes decide whether it is usable. err is set only when NVML
// cannot even count the GPUs.
func Enumerate(lib nvml.Interface, hostRoot string) (gpus []GPU, skipped []error, err error) {
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, nil, fmt.Errorf("nvml: device count: %s", nvml.ErrorString(ret))
	}
	gpus = make([]GPU, 0, count)
	for i := range count {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			skipped = append(skipped, fmt.Errorf("nvml: GPU %d: handle: %s; not advertised", i, nvml.ErrorString(ret)))
			continue
		}
		g, problems := describeGPU(i, dev, hostRoot)
		if g.UUID == "" {
			skipped = append(skipped, problems...)
			continue
		}
		skipped = append(skipped, problems...)
		gpus = append(gpus, g)
	}
	return gpus, skipped, nil
}

// describeGPU reads one GPU; UUID stays empty when the GPU cannot be identified.
func describeGPU(i int, dev nvml.Device, hostRoot string) (GPU, []error) {
	g := GPU{Index: i, Handle: dev, NUMA: -1}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return g, []error{fmt.Errorf("nvml: GPU %d: uuid: %s; not advertised", i, nvml.ErrorString(ret))}
	}
	g.UUID = uuid
	g.Name, _ = dev.GetName()
	if pci, ret := dev.GetPciInfo(); ret == nvml.SUCCESS {
		g.BusID = SysfsBusID(pci)
	}
	g.NUMA = numaNode(hostRoot, g.BusID)
	if g.NUMA < 0 {
		if n, ret := dev.GetNumaNodeId(); ret == nvml.SUCCESS && n >= 0 {
			g.NUMA = n
		}
	}
	cur, _, ret := dev.GetMigMode()
	switch ret {
	case nvml.SUCCESS:
		g.MIGEnabled = cur == nvml.DEVICE_MIG_ENABLE
	case nvml.ERROR_NOT_SUPPORTED:
	default:
		return g, []error{fmt.Errorf("nvml: GPU %d (%s): MIG mode: %s; advertised without MIG devices", i, g.UUID, nvml.ErrorString(ret))}
	}
	if !g.MIGEnabled {
		return g, nil
	}
	migs, err := enumerateMIG(dev)
	if err != nil {
		return g, []error{fmt.Errorf("nvml: GPU %d (%s): %w; advertised without MIG devices", i, g.UUID, err)}
	}
	g.MIG = migs
	return g, nil
}

func enumerateMIG(dev nvml.Device) ([]MIG, error) {
	handles, call, ret := gpulib.MIGHandles(dev)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("MIG devices: %s: %s", call, nvml.ErrorString(ret))
	}
	var migs []MIG
	for n, h := range handles {
		m := MIG{Handle: h}
		if m.UUID, ret = h.GetUUID(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("MIG device %d: uuid: %s", n, nvml.ErrorString(ret))
		}
		attr, ret := h.GetAttributes()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("MIG device %s: attributes: %s", m.UUID, nvml.ErrorString(ret))
		}
		m.Profile = gpulib.MIGProfileName(attr)
		m.GIID, _ = h.GetGpuInstanceId()
		m.CIID, _ = h.GetComputeInstanceId()
		migs = append(migs, m)
	}
	return migs, nil
}

// SysfsBusID converts NVML's bus id ("00000000:07:00.0") to the kernel's ("0000:07:00.0").
func SysfsBusID(p nvml.PciInfo) string {
	id := strings.ToLower(gpulib.BusID(p))
	if dom, rest, ok := strings.Cut(id, ":"); ok && len(dom) > 4 {
		id = dom[len(dom)-4:] + ":" + rest
	}
	return id
}

// numaNode reads the NUMA node of a PCI device from sysfs; -1 when unknown.
func numaNode(hostRoot, busID string) int {
	if busID == "" {
		return -1
	}
	b, err := os.ReadFile(filepath.Join(hostRoot, "sys", "bus", "pci", "devices", busID, "numa_node"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return -1
	}
	return n
}
