// Package discovertest lays out a fake sysfs for tests of GPU discovery: PCI functions the
// way the kernel lists them, so the scanner reads the same shape it reads on a node.
package discovertest

import (
	"os"
	"path/filepath"
	"testing"
)

// pciDevices is the kernel's list of PCI functions (discover.PCIDevicesDir without the
// leading slash; this package does not import discover so discover's own tests can use it).
const pciDevices = "sys/bus/pci/devices"

// Sysfs is a host root with sys/bus/pci/devices; pass Root as --host-root.
type Sysfs struct {
	t    testing.TB
	Root string
}

// New makes an empty PCI bus under a temporary host root.
func New(t testing.TB) *Sysfs {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, pciDevices), 0o755); err != nil {
		t.Fatal(err)
	}
	return &Sysfs{t: t, Root: root}
}

// Add is one PCI function: its directory under sys/devices/pci0000:00/ with vendor and class
// attributes, and a relative symlink to it in sys/bus/pci/devices, as the kernel does.
func (f *Sysfs) Add(addr, vendor, class string) {
	f.t.Helper()
	dev := filepath.Join(f.Root, "sys/devices/pci0000:00", addr)
	if err := os.MkdirAll(dev, 0o755); err != nil {
		f.t.Fatal(err)
	}
	for name, v := range map[string]string{"vendor": vendor, "class": class} {
		if err := os.WriteFile(filepath.Join(dev, name), []byte(v+"\n"), 0o444); err != nil {
			f.t.Fatal(err)
		}
	}
	if err := os.Symlink("../../../devices/pci0000:00/"+addr, filepath.Join(f.Root, pciDevices, addr)); err != nil {
		f.t.Fatal(err)
	}
}

// Remove is a hot unplug (or a GPU fallen off the bus): the kernel drops link and directory.
func (f *Sysfs) Remove(addr string) {
	f.t.Helper()
	if err := os.Remove(filepath.Join(f.Root, pciDevices, addr)); err != nil {
		f.t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(f.Root, "sys/devices/pci0000:00", addr)); err != nil {
		f.t.Fatal(err)
	}
}
