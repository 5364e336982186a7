package render

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// renderDriver makes the driver stage: gpu-driver for the GPU nodes outside the pools with
// their own driver, and gpu-driver-<pool> for each of those pools. For a preinstalled driver
// it only validates (the node agent's driver check, unprivileged); for source=container it
// runs NVIDIA's driver image, which compiles and loads the kernel modules and so must be
// privileged. Either way updates are OnDelete: replacing a driver pod unloads the driver
// under running GPU jobs, so the node agent of each node replaces its own only after
// cordoning and draining it, a bounded number of nodes at a time (driver.upgrade).
func renderDriver(c *plan) (Objects, error) {
	stages := []driverStage{{driver: c.p.Spec.Driver, placement: placement{exclude: c.p.Spec.DriverPools()}}}
	for _, np := range c.p.Spec.DriverPools() {
		d, _ := c.p.Spec.PoolDriver(np)
		stages = append(stages, driverStage{pool: np.Name, driver: d, placement: placement{pool: np.NodeSelector}})
	}
	var out Objects
	for _, st := range stages {
		d := daemonSet{
			name: config.DriverDaemonSet(st.pool), component: "driver", row: config.StageDriver,
			serviceAccount: NameDriver,
			placement:      st.placement,
			configs:        [][]byte{c.agentConfig},
		}
		if st.driver.Source == v1alpha1.SourceContainer {
			// No config hash: the driver container reads no ConfigMap, and a new pod template
			// means a new driver revision, which the agents roll out by cordoning and draining
			// every node of the pool. A policy change elsewhere must not do that.
			d.configs = nil
			c.driverContainer(&d, st.driver)
		} else {
			c.driverValidator(&d, st.pool)
		}
		obj, err := c.build(d)
		if err != nil {
			return nil, err
		}
		out = append(out, obj)
	}
	return out, nil
}

// driverStage is one driver DaemonSet: the pool it serves ("" for the rest) and its driver.
type driverStage struct {
	pool      string
	driver    v1alpha1.Driver
	placement placement
}

// driverReadyPort serves the validator's /readyz.
const driverReadyPort = 8081

func (c *plan) driverValidator(d *daemonSet, pool string) {
	vols, mounts := volumesAndMounts(procDriverMount(), agentConfigMount())
	d.volumes = vols
	d.containers = []corev1.Container{{
		Name:  "driver-validator",
		Image: c.images.gpupolicy,
		// No NODE_NAME and no token: the validator only reports readiness; the gate publishes
		// the driver labels, so this pod needs no API access.
		Command: append([]string{"gpu-node-agent", "driver", "--config", config.AgentConfigPath, "--host-root", hostRoot,
			"--watch", "--listen", ":" + strconv.Itoa(driverReadyPort)}, poolFlag(pool)...),
		// Ready once its first check completed, whatever the verdict: the gate publishes the
		// verdict (labels, GPUStackReady, Events) and holds a bad node's later stages back,
		// so one drifted node never keeps this DaemonSet, and every stage after it, unavailable.
		ReadinessProbe:  httpProbe("/readyz", driverReadyPort, 30, 1),
		Resources:       resources("10m", "32Mi", "128Mi"),
		SecurityContext: nonRoot(unprivileged()),
		VolumeMounts:    mounts,
	}}
}

// driverContainer follows the mounts of NVIDIA's driver container: it installs the userspace
// under /run/nvidia/driver (shared back to the host so the toolkit can use it), reads the
// host's OS release to pick kernel headers, writes firmware and its install log.
func (c *plan) driverContainer(d *daemonSet, drv v1alpha1.Driver) {
	bidirectional := corev1.MountPropagationBidirectional
	runNvidia := hostPath("run-nvidia", "/run/nvidia", corev1.HostPathDirectoryOrCreate, "/run/nvidia", false)
	runNvidia.propagation = &bidirectional
	vols, mounts := volumesAndMounts(
		runNvidia,
		hostPath("host-os-release", "/etc/os-release", corev1.HostPathFile, "/host-etc/os-release", true),
		hostPath("host-firmware", "/lib/firmware", corev1.HostPathDirectoryOrCreate, "/lib/firmware", false),
		hostPath("host-var-log", "/var/log", corev1.HostPathDirectory, "/var/log", false),
	)
	d.hostPID = true
	d.gracePeriod = 120 // unloading the modules takes a while
	d.volumes = vols
	d.containers = []corev1.Container{{
		Name:    DriverContainer,
		Image:   c.driverImage(drv),
		Command: []string{"nvidia-driver", "init"},
		Env:     append([]corev1.EnvVar{nodeNameEnv()}, kernelModuleEnv(drv.KernelModuleType)...),
		// Building the modules for a new kernel takes minutes: allow up to 30 before the
		// kubelet gives up; after that nvidia-smi answering is what ready means.
		StartupProbe:    execProbe(10, 180, "nvidia-smi"),
		ReadinessProbe:  execProbe(30, 3, "nvidia-smi"),
		Resources:       resources("200m", "512Mi", ""),
		SecurityContext: privileged(),
		VolumeMounts:    mounts,
	}}
}

// kernelModuleEnv tells NVIDIA's driver container which kernel modules to build and load, as
// the GPU Operator does (controllers/object_controls.go): KERNEL_MODULE_TYPE, and for open
// OPEN_KERNEL_MODULES_ENABLED=true, which driver containers older than the variable read.
func kernelModuleEnv(kind string) []corev1.EnvVar {
	env := []corev1.EnvVar{{Name: "KERNEL_MODULE_TYPE", Value: kind}}
	if kind == v1alpha1.KernelModulesOpen {
		env = append(env, corev1.EnvVar{Name: "OPEN_KERNEL_MODULES_ENABLED", Value: "true"})
	}
	return env
}

// poolFlag points the validator at its pool's driver.
func poolFlag(pool string) []string {
	if pool == "" {
		return nil
	}
	return []string{"--pool", pool}
}
