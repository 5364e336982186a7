package realnode

import "fmt"

// PauseImage is the sandbox image the node's containerd config names; the suite imports a
// stand-in under this reference (no registry is reachable).
const PauseImage = "registry.k8s.io/pause:3.10"

// Node settings every containerd config carries besides the CRI basics; the suite checks they
// are still in effect after the toolkit stage merged its drop-in (containerd before 2.1 drops
// them when an import replaces the CRI plugin table).
const (
	DebugRuntime       = "runc-debug"
	RegistryConfigPath = "/etc/containerd/certs.d"
	// RuncRoot is the node runc runtime's state directory (options.Root): a runc setting of
	// the node's own that the nvidia handler must inherit, as it must inherit SystemdCgroup on
	// a node whose kubelet uses the systemd cgroup driver (this VM runs no systemd, so runc's
	// systemd driver cannot run here; Root shows the same inheritance on a real pod).
	RuncRoot = "/run/runc-node"
)

// containerdConfig is the node's own /etc/containerd/config.toml: version 2 for 1.6, version 3
// for 2.1, as a distribution would ship it (no imports line: the toolkit stage adds it).
func containerdConfig(version string) (string, error) {
	switch version {
	case "1.6":
		return `# The node's own containerd 1.6 config (config version 2).
version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "` + PauseImage + `"
  # This VM lacks CAP_SYS_RESOURCE: runc cannot set the pause container's oom_score_adj -998.
  restrict_oom_score_adj = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "` + RuncRoot + `"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.` + DebugRuntime + `]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.` + DebugRuntime + `.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"

  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "` + RegistryConfigPath + `"
`, nil
	case "2.1":
		return `# The node's own containerd 2.1 config (config version 3).
version = 3

[plugins."io.containerd.cri.v1.images"]
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "` + PauseImage + `"

  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "` + RegistryConfigPath + `"

[plugins."io.containerd.cri.v1.runtime"]
  # This VM lacks CAP_SYS_RESOURCE: runc cannot set the pause container's oom_score_adj -998.
  restrict_oom_score_adj = true
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]

  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"

    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "` + RuncRoot + `"

    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.` + DebugRuntime + `]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.` + DebugRuntime + `.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false

  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "/etc/cni/net.d"
`, nil
	}
	return "", fmt.Errorf("realnode: Containerd %q: want 1.6 (Debian's) or 2.1 (built by e2e/hack/build-containerd.sh)", version)
}

// cniConfig is a bridge + host-local network on the node's podCIDR. No masquerading: pods
// only talk to the API server (DNAT on the bridge) and to the test, so the CNI plugins add
// no iptables chains a killed node would leave behind.
func cniConfig(bridge, podCIDR string) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "gpupolicy-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}
    }
  ]
}
`, bridge, podCIDR)
}

// kubeletConfig is the KubeletConfiguration DESIGN.md's "A real node runs on this kind of
// machine" arrived at: cgroupfs on cgroup v1, no swap check, the API server's anonymous
// requests allowed (it has no kubelet client certificate), eviction thresholds low enough for
// a shared disk, image GC off (every image is imported; none could be pulled again), and the
// pods' cgroups under the node's own cgroupRoot, so teardown removes only this node's.
func kubeletConfig(port, healthzPort int, podCIDR, cgroupRoot string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
podCIDR: %s
evictionHard:
  memory.available: 1Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusUpdateFrequency: 1s
nodeStatusReportFrequency: 1s
serializeImagePulls: false
registerNode: true
resolvConf: /etc/resolv.conf
cgroupRoot: %s
`, port, healthzPort, podCIDR, cgroupRoot)
}
