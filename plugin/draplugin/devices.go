// Package draplugin is the DRA kubelet plugin of driver gpu.nvidia.com: it publishes the node's
// GPUs and MIG devices as ResourceSlices with the attribute names of NVIDIA's DRA driver (so
// claims and DeviceClass selectors written for it work unchanged), prepares allocated claims
// by writing one CDI spec per claim, and withdraws a device from its slice while the health
// monitor (the device plugin's: XIDs, ECC, lost GPUs) holds it Unhealthy. It runs on the same
// NVML seam as the device plugin (plugin/gpulib) and uses k8s.io/dynamic-resource-allocation's
// kubeletplugin helper for the kubelet's gRPC APIs, registration and slice publication.
package draplugin

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/devices"
)

// Device is one allocatable device: a whole GPU (MIG off) or one MIG device, with what
// Prepare needs to hand it to a container.
type Device struct {
	Name   string // the ResourceSlice device name: gpu-<index> or gpu-<index>-mig-<gi>-<ci>
	UUID   string // what NVIDIA_VISIBLE_DEVICES and the node's CDI spec name it by
	Parent string // the GPU's UUID for a MIG device; "" for a GPU
	Minor  int    // /dev/nvidia<minor> of the GPU (of the parent for MIG); -1 when unknown
	API    resourceapi.Device
}

// Inventory describes every allocatable device of gpus. A GPU with MIG enabled is published
// only as its MIG devices: publishing the parent too would let two claims share its memory.
// Attributes NVML cannot answer are left out rather than guessed.
func Inventory(lib nvml.Interface, gpus []devices.GPU, hostRoot string) []Device {
	driverVersion, _ := lib.SystemGetDriverVersion()
	cudaVersion, ret := lib.SystemGetCudaDriverVersion()
	common := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	if v := semver(driverVersion); v != "" {
		common["driverVersion"] = resourceapi.DeviceAttribute{VersionValue: &v}
	}
	if ret == nvml.SUCCESS {
		v := fmt.Sprintf("%d.%d.0", cudaVersion/1000, cudaVersion%1000/10)
		common["cudaDriverVersion"] = resourceapi.DeviceAttribute{VersionValue: &v}
	}
	var out []Device
	for _, g := range gpus {
		attrs := gpuAttributes(g, hostRoot)
		for k, v := range common {
			attrs[k] = v
		}
		minor := -1
		if m, ret := g.Handle.GetMinorNumber(); ret == nvml.SUCCESS {
			minor = m
		}
		if !g.MIGEnabled {
			attrs["type"] = str(config.DRATypeGPU)
			attrs["uuid"] = str(g.UUID)
			// NVIDIA's driver published index and minor up to v25.3; selectors written then
			// use them.
			attrs["index"] = resourceapi.DeviceAttribute{IntValue: ptr(int64(g.Index))}
			if minor >= 0 {
				attrs["minor"] = resourceapi.DeviceAttribute{IntValue: ptr(int64(minor))}
			}
			capacity := map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{}
			if mem, ret := g.Handle.GetMemoryInfo(); ret == nvml.SUCCESS {
				capacity["memory"] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(int64(mem.Total), resource.BinarySI)}
			}
			name := config.DRAGPUDeviceName(g.Index)
			out = append(out, Device{Name: name, UUID: g.UUID, Minor: minor,
				API: resourceapi.Device{Name: name, Attributes: attrs, Capacity: capacity}})
			continue
		}
		for _, m := range g.MIG {
			ma := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
			for k, v := range attrs {
				ma[k] = v
			}
			ma["type"] = str(config.DRATypeMIG)
			ma["uuid"] = str(m.UUID)
			ma["parentUUID"] = str(g.UUID)
			ma["parentIndex"] = resourceapi.DeviceAttribute{IntValue: ptr(int64(g.Index))}
			if minor >= 0 {
				ma["parentMinor"] = resourceapi.DeviceAttribute{IntValue: ptr(int64(minor))}
			}
			ma["profile"] = str(m.Profile)
			name := config.DRAMIGDeviceName(g.Index, m.GIID, m.CIID)
			out = append(out, Device{Name: name, UUID: m.UUID, Parent: g.UUID, Minor: minor,
				API: resourceapi.Device{Name: name, Attributes: ma, Capacity: migCapacity(m.Handle)}})
		}
	}
	return out
}

// gpuAttributes are the attributes a GPU and its MIG devices share.
func gpuAttributes(g devices.GPU, hostRoot string) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	a := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	if g.Name != "" {
		a["productName"] = str(g.Name)
	}
	if b, ret := g.Handle.GetBrand(); ret == nvml.SUCCESS {
		if s := brandName(b); s != "" {
			a["brand"] = str(s)
		}
	}
	if arch, ret := g.Handle.GetArchitecture(); ret == nvml.SUCCESS {
		if s := architectureName(arch); s != "" {
			a["architecture"] = str(s)
		}
	}
	if major, minor, ret := g.Handle.GetCudaComputeCapability(); ret == nvml.SUCCESS {
		a["cudaComputeCapability"] = resourceapi.DeviceAttribute{VersionValue: ptr(fmt.Sprintf("%d.%d.0", major, minor))}
	}
	if g.BusID != "" {
		// NVIDIA's own name, and Kubernetes' standard one (NVIDIA's driver publishes both).
		a["pcieBusID"] = str(g.BusID)
		a[deviceattribute.StandardDeviceAttributePCIBusID] = str(g.BusID)
		// The PCIe root comes from sysfs (the kernel's device tree); a host without it (or
		// the mock) simply has no pcieRoot.
		if root, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(g.BusID, deviceattribute.WithFSFromRoot(filepath.Join(hostRoot, "sys"))); err == nil {
			a[root.Name] = root.Value
		}
	}
	return a
}

// migCapacity is a MIG device's share of its GPU, NVIDIA's capacity names.
func migCapacity(h nvml.Device) map[resourceapi.QualifiedName]resourceapi.DeviceCapacity {
	c := map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{}
	attr, ret := h.GetAttributes()
	if ret != nvml.SUCCESS {
		return c
	}
	n := func(v uint32) resourceapi.DeviceCapacity {
		return resourceapi.DeviceCapacity{Value: *resource.NewQuantity(int64(v), resource.DecimalSI)}
	}
	c["memory"] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(int64(attr.MemorySizeMB)*1024*1024, resource.BinarySI)}
	c["multiprocessors"] = n(attr.MultiprocessorCount)
	c["copyEngines"] = n(attr.SharedCopyEngineCount)
	c["decoders"] = n(attr.SharedDecoderCount)
	c["encoders"] = n(attr.SharedEncoderCount)
	c["jpegEngines"] = n(attr.SharedJpegCount)
	c["ofaEngines"] = n(attr.SharedOfaCount)
	return c
}

// semver turns NVIDIA's driver version ("580.95.05") into a semantic version ("580.95.5"), the
// form a version attribute must have; "" when it is not three numbers.
func semver(v string) string {
	parts := strings.Split(v, ".")
	if len(parts) == 2 {
		parts = append(parts, "0")
	}
	if len(parts) != 3 {
		return ""
	}
	for i, p := range parts {
		var n int
		if _, err := fmt.Sscanf(p, "%d", &n); err != nil || fmt.Sprintf("%0*d", len(p), n) != p {
			return ""
		}
		parts[i] = fmt.Sprint(n)
	}
	return strings.Join(parts, ".")
}

func brandName(b nvml.BrandType) string {
	switch b {
	case nvml.BRAND_QUADRO:
		return "Quadro"
	case nvml.BRAND_TESLA:
		return "Tesla"
	case nvml.BRAND_NVS:
		return "NVS"
	case nvml.BRAND_GRID:
		return "Grid"
	case nvml.BRAND_GEFORCE:
		return "GeForce"
	case nvml.BRAND_TITAN:
		return "Titan"
	case nvml.BRAND_NVIDIA:
		return "Nvidia"
	}
	return ""
}

func architectureName(a nvml.DeviceArchitecture) string {
	switch a {
	case nvml.DEVICE_ARCH_KEPLER:
		return "Kepler"
	case nvml.DEVICE_ARCH_MAXWELL:
		return "Maxwell"
	case nvml.DEVICE_ARCH_PASCAL:
		return "Pascal"
	case nvml.DEVICE_ARCH_VOLTA:
		return "Volta"
	case nvml.DEVICE_ARCH_TURING:
		return "Turing"
	case nvml.DEVICE_ARCH_AMPERE:
		return "Ampere"
	case nvml.DEVICE_ARCH_ADA:
		return "Ada Lovelace"
	case nvml.DEVICE_ARCH_HOPPER:
		return "Hopper"
	case nvml.DEVICE_ARCH_BLACKWELL:
		return "Blackwell"
	}
	return ""
}

func str(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }

func ptr[T any](v T) *T { return &v }
