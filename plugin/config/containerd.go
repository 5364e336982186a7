package config

// ContainerdConfigVersion is the config file schema ("version = N") that containerd of the
// given major version reads: 2 before containerd 2.0, 3 from 2.0 on. The fn writes the
// drop-in in it and the node agent's installer merges the node's config with it, so both
// sides take it from here.
func ContainerdConfigVersion(containerdMajor int) int {
	if containerdMajor >= 2 {
		return 3
	}
	return 2
}

// CRIRuntimePlugin is the containerd plugin whose containerd.runtimes table holds the runtime
// handlers in a config version: containerd 2.0 split the CRI plugin and renamed its runtime
// part.
func CRIRuntimePlugin(configVersion int) string {
	if configVersion >= 3 {
		return "io.containerd.cri.v1.runtime"
	}
	return "io.containerd.grpc.v1.cri"
}
