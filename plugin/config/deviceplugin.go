package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

// Defaults of the device plugin settings (spec.devicePlugin of the policy). The function
// renders them into every device-plugin ConfigMap and the plugin runs with them when it has no
// --config, so both sides take them from here: a default changed on one side only cannot be.
const (
	DefaultResourceName       = "nvidia.com/gpu"
	DefaultMIGStrategy        = MIGNone
	DefaultDeviceListStrategy = DeviceListCDICRI
	DefaultReplicas           = 1
	// MaxReplicas bounds time-slicing replicas. The kubelet reads ListAndWatch with gRPC's
	// default 4 MiB message limit, and one response lists every device id of a resource:
	// under MIG 16 GPUs × 7 instances × replicas, ~66 bytes each. At 256 that is 28,672
	// devices, 1.9 MB on the wire (the real response, measured in fn/validate's tests), under
	// half the limit; from ~570 the kubelet refuses the list and the node advertises nothing.
	// The plugin's memory (~530 bytes per device, 15 MB here) stays far below the 256Mi limit
	// of the rendered DaemonSet.
	MaxReplicas = 256
	// DefaultRecoveryPeriod applies when healthChecks.recoveryPeriod is empty. The policy has
	// no such field, so the rendered configs leave it empty and this is the value nodes run with.
	DefaultRecoveryPeriod = 2 * time.Minute
)

// The device plugin's socket: one per resource, <plugin dir>/gpupolicy-<resource>.sock. Linux
// takes a unix socket path of at most 107 bytes (sun_path is 108 with its NUL); one longer is
// "bind: invalid argument" and the plugin cannot start. The policy's resource names are bounded
// so the socket fits in DefaultPluginDir, where the rendered DaemonSet mounts the kubelet's.
const (
	DefaultPluginDir   = "/var/lib/kubelet/device-plugins"
	MaxSocketPathBytes = 107
	// MaxResourceNameBytes is the longest resource name whose socket fits in DefaultPluginDir.
	MaxResourceNameBytes = MaxSocketPathBytes - len(DefaultPluginDir+"/gpupolicy-.sock")
	// MaxMIGProfileBytes bounds the profile of a mixed-strategy resource,
	// "<domain>/mig-<profile>": NVIDIA's longest today are like "1g.18gb+gfx" (11 bytes).
	MaxMIGProfileBytes = 16
)

// SocketName is the file name of a resource's socket: "gpupolicy-nvidia.com-gpu.sock".
func SocketName(resource string) string {
	return "gpupolicy-" + strings.ReplaceAll(resource, "/", "-") + ".sock"
}

// MIG strategies (migStrategy): how a MIG-enabled GPU is advertised. The policy validates
// them, the device plugin advertises by them and the agent's feature labels name them.
const (
	MIGNone   = "none"   // MIG slices are not advertised
	MIGSingle = "single" // every GPU is sliced alike; the slices are advertised as the resource
	MIGMixed  = "mixed"  // each slice shape is its own resource, nvidia.com/mig-<profile>
)

// Device-list strategies (deviceListStrategy): how Allocate hands the devices to containerd.
const (
	DeviceListCDICRI = "cdi-cri" // CDI device names in the CRI CDIDevices field (needs containerd >= 1.7)
	DeviceListEnvVar = "envvar"  // NVIDIA_VISIBLE_DEVICES, read by nvidia-container-runtime
)

// DefaultIgnoredXIDs are XIDs caused by applications, not by the GPU (13 graphics engine
// exception, 31 MMU fault, 43 stopped channel, 45 preemptive cleanup, 68 video decoder
// exception, 109 context switch timeout), the same list as NVIDIA's device plugin. A new slice
// each call, so a caller that edits its copy cannot change the default.
func DefaultIgnoredXIDs() []uint64 { return []uint64{13, 31, 43, 45, 68, 109} }

// DefaultDevicePlugin is the device plugin configuration of a policy that sets nothing in
// spec.devicePlugin; the plugin runs with it when --config is not given.
func DefaultDevicePlugin() DevicePlugin {
	return DevicePlugin{
		ResourceName:       DefaultResourceName,
		MIGStrategy:        DefaultMIGStrategy,
		DeviceListStrategy: DefaultDeviceListStrategy,
		Sharing:            Sharing{TimeSlicing: TimeSlicing{Replicas: DefaultReplicas}},
		HealthChecks:       HealthChecks{Enabled: true, IgnoredXIDs: DefaultIgnoredXIDs()},
	}
}

// LoadDevicePlugin reads a rendered device plugin config (YAML, strict: unknown fields are
// errors) over the defaults and validates it. Errors name the file and the field.
func LoadDevicePlugin(path string) (DevicePlugin, error) {
	cfg := DefaultDevicePlugin()
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("device plugin config: %w", err)
	}
	if err := oneDocument(b); err != nil {
		return cfg, fmt.Errorf("device plugin config %s: %w (the file is rendered by gpupolicy-fn into ConfigMap %s; re-render it, or leave --config empty for the defaults)", path, err, DevicePluginConfigMap)
	}
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		return cfg, fmt.Errorf("device plugin config %s: %w (the file is rendered by gpupolicy-fn into ConfigMap %s; re-render it)", path, err, DevicePluginConfigMap)
	}
	if err := ValidateDevicePlugin(cfg); err != nil {
		return cfg, fmt.Errorf("device plugin config %s: %w", path, err)
	}
	return cfg, nil
}

// oneDocument refuses a file that holds no YAML document with settings (an empty ConfigMap
// key would otherwise run the plugin with the defaults, whatever the policy says) or more than
// one (the YAML reader takes the first and would drop the rest without a word).
func oneDocument(b []byte) error {
	dec := yamlv3.NewDecoder(bytes.NewReader(b))
	n := 0
	for {
		var doc yamlv3.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err // UnmarshalStrict would name it the same way; say it here with the file
		}
		n++
		if n > 1 {
			return fmt.Errorf("line %d: a second YAML document: the config is one document (one ConfigMap key per pool)", doc.Line)
		}
		if len(doc.Content) == 0 || (doc.Content[0].Kind == yamlv3.ScalarNode && doc.Content[0].Tag == "!!null") {
			return errors.New("the file holds no settings (empty, or comments only)")
		}
	}
	if n == 0 {
		return errors.New("the file holds no settings (empty, or comments only)")
	}
	return nil
}

// resourceNameRE is a Kubernetes extended resource name: a domain, "/", a name.
var resourceNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)

// ValidateDevicePlugin checks every field the plugin acts on.
func ValidateDevicePlugin(cfg DevicePlugin) error {
	if !resourceNameRE.MatchString(cfg.ResourceName) {
		return fmt.Errorf("field resourceName: %q is not an extended resource name like %s", cfg.ResourceName, DefaultResourceName)
	}
	if cfg.Allocation != "" && cfg.Allocation != AllocationDRA {
		return fmt.Errorf("field allocation: %q: want %q or none (the device plugin)", cfg.Allocation, AllocationDRA)
	}
	switch cfg.MIGStrategy {
	case MIGNone, MIGSingle, MIGMixed:
	default:
		return fmt.Errorf("field migStrategy: %q: want %s, %s or %s", cfg.MIGStrategy, MIGNone, MIGSingle, MIGMixed)
	}
	switch cfg.DeviceListStrategy {
	case DeviceListCDICRI, DeviceListEnvVar:
	default:
		return fmt.Errorf("field deviceListStrategy: %q: want %s or %s", cfg.DeviceListStrategy, DeviceListCDICRI, DeviceListEnvVar)
	}
	switch r := cfg.Sharing.TimeSlicing.Replicas; {
	case r < 1:
		return fmt.Errorf("field sharing.timeSlicing.replicas: %d: want 1 (no sharing) or more", r)
	case r > MaxReplicas:
		// gpupolicy-fn refuses such a policy; a hand-edited ConfigMap must not make
		// ListAndWatch too large for the kubelet to read (nothing would be advertised).
		return fmt.Errorf("field sharing.timeSlicing.replicas: %d is over the limit of %d: every replica of every device goes into one ListAndWatch message, which the kubelet reads with gRPC's 4 MiB limit; use at most %d", r, MaxReplicas, MaxReplicas)
	}
	if err := validateMPS(cfg); err != nil {
		return err
	}
	if _, err := RecoveryPeriod(cfg); err != nil {
		return err
	}
	return nil
}

// validateMPS refuses what k8s-device-plugin v0.17.4 refuses with sharing.mps (fewer than 2
// replicas, migStrategy mixed; MIG devices are the daemon's to refuse on the node) and what the MPS server cannot serve (more than
// MaxMPSClients clients per GPU), and time-slicing beside it.
func validateMPS(cfg DevicePlugin) error {
	m := cfg.Sharing.MPS
	if m == nil {
		return nil
	}
	switch {
	case m.Replicas < 2:
		return fmt.Errorf("field sharing.mps.replicas: %d: MPS shares a GPU between 2 or more clients; remove sharing.mps for whole GPUs", m.Replicas)
	case m.Replicas > MaxMPSClients:
		return fmt.Errorf("field sharing.mps.replicas: %d is over %d: the MPS server accepts at most %d clients per GPU; use at most %d", m.Replicas, MaxMPSClients, MaxMPSClients, MaxMPSClients)
	case cfg.Sharing.TimeSlicing.Replicas > 1:
		return fmt.Errorf("field sharing: mps and timeSlicing replicas %d are both set; a GPU is shared one way: keep one", cfg.Sharing.TimeSlicing.Replicas)
	case cfg.MIGStrategy == MIGMixed:
		// single is k8s-device-plugin's too: whole GPUs where none is in MIG mode, which the
		// MPS control daemon checks on the node.
		return errors.New("field migStrategy: mixed with sharing.mps: MPS does not share MIG devices (k8s-device-plugin refuses it too); use migStrategy none")
	case cfg.Allocation == AllocationDRA:
		return fmt.Errorf("field sharing.mps with allocation dra: the DRA plugin shares GPUs per claim (a GpuConfig with sharing.strategy MPS), not per pool")
	}
	return nil
}

// RecoveryPeriod is healthChecks.recoveryPeriod, or DefaultRecoveryPeriod when empty.
func RecoveryPeriod(cfg DevicePlugin) (time.Duration, error) {
	s := cfg.HealthChecks.RecoveryPeriod
	if s == "" {
		return DefaultRecoveryPeriod, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("field healthChecks.recoveryPeriod: %q: want a positive Go duration such as 2m", s)
	}
	return d, nil
}
