package render

import (
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// toolkitWatch is how often the installer re-checks the node and re-applies the drop-in if
// something (a person, a node image update) changed containerd's configuration.
const toolkitWatch = "5m"

// toolkitScratchDir is an emptyDir in the toolkit-copy container: where NVIDIA's installer may
// write a containerd config that nothing reads.
const toolkitScratchDir = "/run/gpupolicy-scratch"

// renderToolkit makes the toolkit stage: for source=container an init container from NVIDIA's
// toolkit image copies the runtime binaries to the host (its own containerd editing switched
// off), then `gpu-node-agent toolkit install` installs the reviewed drop-in, restarts
// containerd only when the bytes changed, verifies the handler and writes the status file the
// gate reads. Both write the host, so both are privileged; hostPID lets the installer find
// containerd's process and signal it (restartMode signal).
//
// The toolkit's config and the CDI spec name the driver's root on the host, which depends on
// the driver's source: gpu-container-toolkit serves the nodes whose driver root is
// spec.driver's, and gpu-container-toolkit-<pool> each pool whose own driver has the other root.
func renderToolkit(c *plan) (Objects, error) {
	var out Objects
	for _, st := range c.toolkitStages() {
		obj, err := c.toolkitDaemonSet(st)
		if err != nil {
			return nil, err
		}
		out = append(out, obj)
	}
	return out, nil
}

// toolkitStage is one toolkit DaemonSet: its name, where it runs and the driver root there.
type toolkitStage struct {
	name       string
	placement  placement
	driverRoot string
}

// toolkitStages: one for the driver root of spec.driver, less the pools whose own driver has
// another root, and one for each of those pools.
func (c *plan) toolkitStages() []toolkitStage {
	specRoot := driverRoot(c.p.Spec.Driver)
	var other []*v1alpha1.NodePool
	for _, np := range c.p.Spec.DriverPools() {
		if d, _ := c.p.Spec.PoolDriver(np); driverRoot(d) != specRoot {
			other = append(other, np)
		}
	}
	stages := []toolkitStage{{name: NameToolkit, driverRoot: specRoot,
		placement: placement{exclude: other}}}
	for _, np := range other {
		d, _ := c.p.Spec.PoolDriver(np)
		stages = append(stages, toolkitStage{name: NameToolkit + "-" + np.Name, driverRoot: driverRoot(d),
			placement: placement{pool: np.NodeSelector}})
	}
	return stages
}

func (c *plan) toolkitDaemonSet(st toolkitStage) (Object, error) {
	s := &c.p.Spec
	cr := &s.ContainerRuntime
	// The installer runs the node's own containerd (config dump) and systemctl chrooted into
	// the host root, so it sees the whole host read-only, plus read-write mounts of exactly the
	// directories it writes: containerd's config and drop-in directories and its state.
	hostToContainer := corev1.MountPropagationHostToContainer
	root := hostPath("host-root", "/", corev1.HostPathDirectory, hostRoot, true)
	root.propagation = &hostToContainer
	ms := []mount{
		root,
		hostPath("host-containerd-config", path.Dir(cr.ConfigPath), corev1.HostPathDirectoryOrCreate, hostRoot+path.Dir(cr.ConfigPath), false),
	}
	if !strings.HasPrefix(cr.DropInDir+"/", path.Dir(cr.ConfigPath)+"/") {
		ms = append(ms, hostPath("host-containerd-drop-in", cr.DropInDir, corev1.HostPathDirectoryOrCreate, hostRoot+cr.DropInDir, false))
	}
	ms = append(ms, stateMount(false), configMapMount("containerd-drop-in", config.DropInConfigMap, config.DropInDir))
	cdiSpec := c.cdiSpec()
	if cdiSpec {
		// The installer writes the CDI spec through /host/var/run/cdi. When the host's
		// /var/run is the usual symlink to /run, the kernel and the runtime both resolve it
		// in the container's root, so write and mount meet in the container's /run/cdi.
		ms = append(ms, cdiMount(hostRoot+cdiDir))
	}
	vols, mounts := volumesAndMounts(ms...)
	d := daemonSet{
		name: st.name, component: "toolkit", row: config.StageToolkit,
		serviceAccount: NameToolkit,
		placement:      st.placement,
		hostPID:        true,
		maxUnavailable: maxUnavailableOf(c.p.Spec.Toolkit.UpdateStrategy),
		configs:        [][]byte{[]byte(c.dropIn)},
		volumes:        vols,
		containers: []corev1.Container{{
			Name:  "install",
			Image: c.images.gpupolicy,
			Command: []string{"gpu-node-agent", "toolkit", "install",
				"--host-root", hostRoot,
				"--drop-in", config.DropInDir + "/" + config.DropInFile,
				"--containerd-version", cr.Version,
				"--config-path", cr.ConfigPath,
				"--drop-in-dir", cr.DropInDir,
				"--restart-mode", cr.RestartMode,
				"--watch", toolkitWatch},
			Env:             []corev1.EnvVar{nodeNameEnv()},
			Resources:       resourcesOr(c.p.Spec.Toolkit.Resources, "20m", "64Mi", "256Mi"),
			SecurityContext: privileged(),
			VolumeMounts:    mounts,
		}},
	}
	if cdiSpec {
		d.containers[0].Command = append(d.containers[0].Command, c.cdiSpecFlags(st.driverRoot)...)
	}
	if s.Toolkit.Source == v1alpha1.SourceContainer {
		c.toolkitCopy(&d, st.driverRoot)
	}
	return c.build(d)
}

// cdiDir holds the CDI specs: one of containerd's default cdi_spec_dirs.
var cdiDir = path.Dir(config.CDISpecFile)

func cdiMount(at string) mount {
	return hostPath("host-cdi", cdiDir, corev1.HostPathDirectoryOrCreate, at, false)
}

// cdiSpec: the device plugin of the spec or of some pool hands containerd CDI device names
// nvidia.com/gpu=<uuid> (deviceListStrategy cdi-cri), so the node needs a CDI spec that names
// devices by UUID. NVIDIA's toolkit image names its own spec's devices differently
// (management.nvidia.com/gpu, "all" only), so the installer generates this one with the
// node's nvidia-ctk, before it opens the gate.
func (c *plan) cdiSpec() bool {
	if !v1alpha1.Bool(c.p.Spec.Toolkit.CDI) {
		return false
	}
	for _, pl := range devicePluginPools(c.p) {
		// A DRA pool's claims inject each GPU through the node spec's nvidia.com/gpu=<uuid>
		// (the DRA plugin's own spec only carries device nodes and turns the runtime's
		// NVIDIA_VISIBLE_DEVICES off), so those nodes need the spec as cdi-cri ones do.
		if pl.allocation == v1alpha1.AllocationDRA || (pl.settings != nil && pl.settings.DeviceListStrategy == config.DeviceListCDICRI) {
			return true
		}
	}
	return false
}

// cdiSpecFlags tell the installer where the spec goes, which nvidia-ctk makes it (the copied
// one for source=container, else the node's PATH) and where the driver lives.
func (c *plan) cdiSpecFlags(driverRoot string) []string {
	flags := []string{"--cdi-spec", config.CDISpecFile}
	if c.p.Spec.Toolkit.Source == v1alpha1.SourceContainer {
		flags = append(flags, "--nvidia-ctk", config.ToolkitInstallDir+"/nvidia-ctk")
	}
	if driverRoot != "/" {
		flags = append(flags, "--cdi-driver-root", driverRoot)
	}
	return flags
}

// driverRoot is where a driver's files are on the host: NVIDIA's driver container installs
// them under /run/nvidia/driver.
func driverRoot(d v1alpha1.Driver) string {
	if d.Source == v1alpha1.SourceContainer {
		return "/run/nvidia/driver"
	}
	return "/"
}

// toolkitCopy adds NVIDIA's toolkit installer as an init container that only copies the
// binaries (and, with CDI, generates the CDI spec); containerd is configured by the reviewed
// drop-in alone.
func (c *plan) toolkitCopy(d *daemonSet, driverRoot string) {
	s := &c.p.Spec
	ms := []mount{
		hostPath("host-nvidia-install", path.Dir(config.ToolkitInstallDir), corev1.HostPathDirectoryOrCreate, path.Dir(config.ToolkitInstallDir), false),
		hostPath("host-driver-root", driverRoot, corev1.HostPathDirectory, "/driver-root", true),
		emptyDirMount("toolkit-scratch", toolkitScratchDir),
	}
	cdi := v1alpha1.Bool(s.Toolkit.CDI)
	if cdi {
		ms = append(ms, cdiMount(cdiDir))
	}
	vols, mounts := volumesAndMounts(ms...)
	for _, v := range vols {
		// The installer may already mount the CDI directory (--cdi-spec): one volume, two mounts.
		if !slices.ContainsFunc(d.volumes, func(have corev1.Volume) bool { return have.Name == v.Name }) {
			d.volumes = append(d.volumes, v)
		}
	}
	// The installer's containerd editing is switched off three ways, so that no toolkit
	// release's flag names decide whether the host's containerd gets rewritten: it is told not
	// to configure a runtime (NO_RUNTIME_CONFIG), any config it writes anyway goes to pod-local
	// scratch (RUNTIME_CONFIG, and CONTAINERD_CONFIG for older releases), and it never restarts
	// containerd (RUNTIME_RESTART_MODE=none; it could not: the host's config and socket are
	// not mounted here). NO_DAEMON makes it exit after copying, so no cleanup runs on pod stop.
	scratch := toolkitScratchDir + "/containerd-config.toml"
	env := []corev1.EnvVar{
		{Name: "NO_DAEMON", Value: "true"},
		{Name: "NO_RUNTIME_CONFIG", Value: "true"},
		{Name: "RUNTIME_CONFIG", Value: scratch},
		{Name: "CONTAINERD_CONFIG", Value: scratch},
		{Name: "RUNTIME_RESTART_MODE", Value: "none"},
		{Name: "RUNTIME", Value: "containerd"},
		{Name: "TOOLKIT_INSTALL_DIR", Value: path.Dir(config.ToolkitInstallDir)},
		{Name: "NVIDIA_DRIVER_ROOT", Value: driverRoot},
		{Name: "DRIVER_ROOT_CTR_PATH", Value: "/driver-root"},
		{Name: "CDI_ENABLED", Value: strconv.FormatBool(cdi)},
	}
	d.initContainers = []corev1.Container{{
		Name:            "toolkit-copy",
		Image:           c.images.toolkit,
		Env:             env,
		Resources:       resourcesOr(c.p.Spec.Toolkit.Resources, "20m", "64Mi", "256Mi"),
		SecurityContext: privileged(),
		VolumeMounts:    mounts,
	}}
}
