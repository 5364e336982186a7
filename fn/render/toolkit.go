package render

import (
	"path"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// toolkitWatch is how often the installer re-checks the node and re-applies the drop-in if
// something (a person, a node image update) changed containerd's configuration.
const toolkitWatch = "5m"

// renderToolkit makes the toolkit stage: for source=container an init container from NVIDIA's
// toolkit image copies the runtime binaries to the host (its own containerd editing switched
// off), then `gpu-node-agent toolkit install` installs the reviewed drop-in, restarts
// containerd only when the bytes changed, verifies the handler and writes the status file the
// gate reads. Both write the host, so both are privileged; hostPID lets the installer find
// containerd's process and signal it (restartMode signal).
func renderToolkit(c *plan) (Objects, error) {
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
	vols, mounts := volumesAndMounts(ms...)
	d := daemonSet{
		name: NameToolkit, component: "toolkit", stage: StageToolkit,
		placement: placement{gate: config.LabelDeployToolkit},
		hostPID:   true,
		configs:   [][]byte{[]byte(c.dropIn)},
		volumes:   vols,
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
			Resources:       resources("20m", "64Mi", "256Mi"),
			SecurityContext: privileged(),
			VolumeMounts:    mounts,
		}},
	}
	if s.Toolkit.Source == v1alpha1.SourceContainer {
		c.toolkitCopy(&d)
	}
	obj, err := c.build(d)
	return Objects{obj}, err
}

// toolkitCopy adds NVIDIA's toolkit installer as an init container that only copies the
// binaries (and, with CDI, generates the CDI spec); containerd is configured by the reviewed
// drop-in alone.
func (c *plan) toolkitCopy(d *daemonSet) {
	s := &c.p.Spec
	driverRoot := "/"
	if s.Driver.Source == v1alpha1.SourceContainer {
		driverRoot = "/run/nvidia/driver"
	}
	ms := []mount{
		hostPath("host-nvidia-install", path.Dir(config.ToolkitInstallDir), corev1.HostPathDirectoryOrCreate, path.Dir(config.ToolkitInstallDir), false),
		hostPath("host-driver-root", driverRoot, corev1.HostPathDirectory, "/driver-root", true),
	}
	cdi := v1alpha1.Bool(s.Toolkit.CDI)
	if cdi {
		ms = append(ms, hostPath("host-cdi", "/var/run/cdi", corev1.HostPathDirectoryOrCreate, "/var/run/cdi", false))
	}
	vols, mounts := volumesAndMounts(ms...)
	d.volumes = append(d.volumes, vols...)
	env := []corev1.EnvVar{
		{Name: "NO_DAEMON", Value: "true"},
		{Name: "NO_RUNTIME_CONFIG", Value: "true"},
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
		Resources:       resources("20m", "64Mi", "256Mi"),
		SecurityContext: privileged(),
		VolumeMounts:    mounts,
	}}
}
