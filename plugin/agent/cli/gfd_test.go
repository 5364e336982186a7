package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/internal/peer"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

// gfdCase is one node: its device plugin settings, said once the agent's way (the devicePlugin
// of the rendered agent config) and once GFD's (a k8s-device-plugin config file), its MIG
// partitioning and what its sysfs shows.
type gfdCase struct {
	name    string
	agent   string        // devicePlugin of the agent config (flow YAML)
	gfd     string        // GFD's config file
	mig     map[int][]int // GPU index -> GPU instance profiles (MIG on); absent GPUs keep MIG off
	class   string        // PCI class of every GPU; default 0x030200 (3D controller)
	machine string        // DMI product name; "-" leaves the file out
	vgpu    bool          // the GPUs' config space carries NVIDIA's vGPU capability
}

// gfdConfig is a k8s-device-plugin config file with the given MIG strategy and sharing.
func gfdConfig(migStrategy, sharing string) string {
	return "version: v1\nflags:\n  migStrategy: " + migStrategy + "\n" + sharing
}

// TestLabelsMatchGFD compares, for each sharing and MIG mode, the labels `gpu-node-agent labels
// --nvml-mock dgxa100` writes with those gpu-feature-discovery v0.17.4's own labelers compute for
// the same GPUs (the same mock, the same MIG state file, the same sysfs) and the same settings.
// They must be equal, but for GFD's timestamp label, which gfd-labels leaves out (--no-timestamp).
//
// How the settings correspond: the agent's time-slicing replicas apply to every resource the
// device plugin advertises (k8s-device-plugin: one sharing resource entry per resource name);
// GFD's rename (renameByDefault) is a resourceName other than nvidia.com/gpu.
func TestLabelsMatchGFD(t *testing.T) {
	bin := peer.GFDLabels(t)
	if os.Geteuid() != 0 {
		peer.Missing(t, "the GFD peer reads the fake GPUs' sysfs at /sys/bus/pci/devices, bind-mounted in a private mount namespace: run as root")
	}
	const (
		ts4    = "  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 4}\n"
		slice1 = nvml.GPU_INSTANCE_PROFILE_1_SLICE
		slice3 = nvml.GPU_INSTANCE_PROFILE_3_SLICE
		slice4 = nvml.GPU_INSTANCE_PROFILE_4_SLICE
	)
	allGPUs := func(profiles ...int) map[int][]int {
		m := map[int][]int{}
		for i := range 8 {
			m[i] = profiles
		}
		return m
	}
	cases := []gfdCase{
		{name: "no sharing", agent: `{resourceName: nvidia.com/gpu, migStrategy: none, sharing: {timeSlicing: {replicas: 1}}}`,
			gfd: gfdConfig("none", "")},
		{name: "time-slicing", agent: `{resourceName: nvidia.com/gpu, migStrategy: none, sharing: {timeSlicing: {replicas: 4}}}`,
			gfd: gfdConfig("none", "sharing:\n"+ts4)},
		{name: "time-slicing renamed", agent: `{resourceName: nvidia.com/gpu.shared, migStrategy: none, sharing: {timeSlicing: {replicas: 4}}}`,
			gfd: gfdConfig("none", "sharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n    - {name: nvidia.com/gpu, replicas: 4}\n")},
		{name: "mps", agent: `{resourceName: nvidia.com/gpu, migStrategy: none, sharing: {timeSlicing: {replicas: 1}, mps: {replicas: 4}}}`,
			gfd: gfdConfig("none", "sharing:\n  mps:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 4}\n")},
		{name: "mig single", agent: `{resourceName: nvidia.com/gpu, migStrategy: single, sharing: {timeSlicing: {replicas: 1}}}`,
			gfd: gfdConfig("single", ""), mig: allGPUs(slice1, slice1, slice1)},
		{name: "mig single time-slicing", agent: `{resourceName: nvidia.com/gpu, migStrategy: single, sharing: {timeSlicing: {replicas: 4}}}`,
			gfd: gfdConfig("single", "sharing:\n"+ts4), mig: allGPUs(slice1, slice1)},
		{name: "mig single invalid", agent: `{resourceName: nvidia.com/gpu, migStrategy: single, sharing: {timeSlicing: {replicas: 4}}}`,
			gfd: gfdConfig("single", "sharing:\n"+ts4), mig: map[int][]int{0: {slice1}, 1: {slice3}, 2: {slice1}, 3: {slice1}, 4: {slice1}, 5: {slice1}, 6: {slice1}, 7: {slice1}}},
		{name: "mig mixed", agent: `{resourceName: nvidia.com/gpu, migStrategy: mixed, sharing: {timeSlicing: {replicas: 1}}}`,
			gfd: gfdConfig("mixed", ""), mig: map[int][]int{0: {slice3, slice4}, 1: {slice3}}},
		{name: "mig mixed time-slicing", agent: `{resourceName: nvidia.com/gpu, migStrategy: mixed, sharing: {timeSlicing: {replicas: 2}}}`,
			gfd: gfdConfig("mixed", "sharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 2}\n"+
				"    - {name: nvidia.com/mig-3g.20gb, replicas: 2}\n    - {name: nvidia.com/mig-4g.20gb, replicas: 2}\n"),
			mig: map[int][]int{0: {slice3, slice4}, 1: {slice3}}},
		{name: "mig mode everywhere, strategy none", agent: `{resourceName: nvidia.com/gpu, migStrategy: none, sharing: {timeSlicing: {replicas: 4}}}`,
			gfd: gfdConfig("none", "sharing:\n"+ts4), mig: allGPUs(slice1)},
		{name: "graphics vGPU guest without DMI", agent: `{resourceName: nvidia.com/gpu, migStrategy: none, sharing: {timeSlicing: {replicas: 1}}}`,
			gfd: gfdConfig("none", ""), class: "0x030000", machine: "-", vgpu: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			state := filepath.Join(dir, "mig.json")
			t.Setenv(gpumock.MIGStateEnv, state)
			m, err := gpumock.New("dgxa100", gpumock.WithMIGStateFile(state))
			if err != nil {
				t.Fatal(err)
			}
			for _, gpu := range slices.Sorted(maps.Keys(c.mig)) {
				if err := m.ConfigureMIG(gpu, c.mig[gpu]...); err != nil {
					t.Fatalf("MIG on GPU %d: %v", gpu, err)
				}
			}
			sysfs := fakeSysfs(t, dir, m, c)

			cfg := writeConfig(t, strings.Replace(agentYAML,
				"devicePlugin: {resourceName: nvidia.com/gpu, migStrategy: none, deviceListStrategy: cdi-cri, sharing: {timeSlicing: {replicas: 2}}, healthChecks: {enabled: true, ignoredXIDs: [13]}}",
				"devicePlugin: "+strings.Replace(c.agent, "{resourceName:", "{deviceListStrategy: cdi-cri, healthChecks: {enabled: true}, resourceName:", 1), 1))
			code, out, errs := run("labels", "--config", cfg, "--node", "", "--nvml-mock", "dgxa100",
				"--mock-driver-version", "580.95.05", "--mock-cuda-version", "13.0", "--sysfs", sysfs)
			if code != 0 {
				t.Fatalf("gpu-node-agent labels: exit %d: %s", code, errs)
			}
			ours := map[string]string{}
			for line := range strings.Lines(out) {
				k, v, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
				ours[k] = v
			}

			gfdFile := filepath.Join(dir, "gfd.yaml")
			if err := os.WriteFile(gfdFile, []byte(c.gfd), 0o644); err != nil {
				t.Fatal(err)
			}
			// GFD reads the GPUs' PCI attributes at /sys/bus/pci/devices (go-nvlib's nvpci and its
			// vGPU library have no other root): the fake bus is bind-mounted there, privately.
			cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
				`mount --bind "$0" /sys/bus/pci/devices && exec "$@"`, filepath.Join(sysfs, "bus/pci/devices"),
				bin, "--config-file", gfdFile, "--machine-type-file", filepath.Join(sysfs, "class/dmi/id/product_name"),
				"--mock-driver-version", "580.95.05", "--mock-cuda-version", "13.0")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("gfd-labels: %v\n%s", err, stderr.String())
			}
			theirs := map[string]string{}
			if err := json.Unmarshal(stdout.Bytes(), &theirs); err != nil {
				t.Fatalf("gfd-labels output: %v\n%s", err, stdout.String())
			}
			if len(theirs) < 20 {
				t.Fatalf("GFD computed only %d labels; a broken peer cannot vouch for anything: %v", len(theirs), theirs)
			}
			if diff := labelDiff(ours, theirs); diff != "" {
				t.Errorf("labels differ from gpu-feature-discovery v0.17.4 (- agent, + GFD):\n%s", diff)
			}
		})
	}
}

// fakeSysfs lays out what a DGX A100's sysfs shows GFD and the agent: the DMI product name and,
// for each of the mock's GPUs at its bus address, the PCI attributes go-nvlib's nvpci reads
// (vendor, device, class, numa_node, resource) and a full 256-byte config space.
func fakeSysfs(t *testing.T, dir string, m *gpumock.Mock, c gfdCase) string {
	t.Helper()
	sysfs := filepath.Join(dir, "sys")
	write := func(path, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	switch c.machine {
	case "-":
		if err := os.MkdirAll(filepath.Join(sysfs, "class/dmi/id"), 0o755); err != nil {
			t.Fatal(err)
		}
	case "":
		write(filepath.Join(sysfs, "class/dmi/id/product_name"), "DGXA100 920-23687-2530-000\n")
	default:
		write(filepath.Join(sysfs, "class/dmi/id/product_name"), c.machine+"\n")
	}
	class := c.class
	if class == "" {
		class = "0x030200"
	}
	config := make([]byte, 256)
	copy(config, []byte{0xde, 0x10, 0xb0, 0x20}) // vendor and device ids
	if c.vgpu {
		config[0x06] |= 0x10 // the status register says a capability list follows
		config[0x34] = 0x40
		// A vendor-specific capability (id 9, no next, 31 bytes) signed "VF": one record of
		// another kind (id 1, 4 bytes), then the host driver record (id 0): 10 bytes of
		// version, 10 of branch, NUL-padded.
		vcap := []byte{0x09, 0x00, 31, 'V', 'F', 0x01, 4, 0, 0, 0x00, 22}
		vcap = append(vcap, fmt.Appendf(nil, "%-10s%-10s", "550.54.16", "r550_00")...)
		vcap = bytes.ReplaceAll(vcap, []byte(" "), []byte{0})
		copy(config[0x40:], vcap)
	}
	for i, d := range m.Devices {
		pci, ret := d.GetPciInfo()
		if ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		fn := filepath.Join(sysfs, "bus/pci/devices", gpulib.SysfsAddress(pci))
		write(filepath.Join(fn, "vendor"), "0x10de\n")
		write(filepath.Join(fn, "device"), "0x20b0\n")
		write(filepath.Join(fn, "class"), class+"\n")
		write(filepath.Join(fn, "numa_node"), fmt.Sprintf("%d\n", i/4))
		write(filepath.Join(fn, "resource"), "0x0000000000000000 0x0000000000000000 0x0000000000000000\n")
		write(filepath.Join(fn, "config"), string(config))
	}
	return sysfs
}

// labelDiff lists the labels whose values differ, sorted; "" when the sets are equal.
func labelDiff(ours, theirs map[string]string) string {
	var b strings.Builder
	all := maps.Clone(ours)
	maps.Copy(all, theirs)
	for _, k := range slices.Sorted(maps.Keys(all)) {
		o, inOurs := ours[k]
		g, inTheirs := theirs[k]
		switch {
		case inOurs && !inTheirs:
			fmt.Fprintf(&b, "- %s=%s\n", k, o)
		case !inOurs && inTheirs:
			fmt.Fprintf(&b, "+ %s=%s\n", k, g)
		case o != g:
			fmt.Fprintf(&b, "- %s=%s\n+ %s=%s\n", k, o, k, g)
		}
	}
	return b.String()
}
