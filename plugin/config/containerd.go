package config

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

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

// ContainerdMinors are the containerd minors released since the oldest one gpupolicy supports,
// oldest first: fn/validate/matrix/matrix.yaml's containerd table, which the node programs do
// not ship (a test keeps the two equal). 2.0 followed 1.7: 1.8, 1.9 and 1.10 do not exist.
var ContainerdMinors = []string{"1.6", "1.7", "2.0", "2.1", "2.2"}

var minorRE = regexp.MustCompile(`^(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})$`)

// CheckContainerdMinor refuses a containerd version that is not a minor as the policy writes
// it ("1.7": no "v", no patch), is older than the oldest supported minor, or lies between two
// released minors (it does not exist); a minor newer than the newest known one is accepted,
// as the function accepts it (with the newest minor's facts). field names the setting.
func CheckContainerdMinor(field, s string) error {
	known := strings.Join(ContainerdMinors, ", ")
	m := minorRE.FindStringSubmatch(s)
	if m == nil {
		return fmt.Errorf("%s %q is not a containerd minor X.Y (no \"v\", no patch: `containerd --version` 1.7.27 is 1.7): use one of %s", field, s, known)
	}
	maj, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	for i := len(ContainerdMinors) - 1; i >= 0; i-- {
		var km, kn int
		_, _ = fmt.Sscanf(ContainerdMinors[i], "%d.%d", &km, &kn)
		switch {
		case maj == km && minor == kn:
			return nil
		case maj > km || (maj == km && minor > kn):
			if i == len(ContainerdMinors)-1 {
				return nil // newer than every known minor
			}
			return fmt.Errorf("%s %q: containerd %s was never released (the minors are %s): use the node's minor from `containerd --version`", field, s, s, known)
		}
	}
	return fmt.Errorf("%s %q: containerd %s is older than the oldest supported minor %s: upgrade containerd on the nodes to one of %s", field, s, s, ContainerdMinors[0], known)
}

// NodeRuntimes are runtime handler names containerd nodes already use for other runtimes:
// runc (containerd's default_runtime_name), crun, youki, gVisor's runsc, Kata's kata and
// kata-<hypervisor>, sysbox, Windows' runhcs and the runwasi WebAssembly shims. The function
// refuses them as spec.toolkit.runtimeClassName (fn/validate); the node side refuses them too.
var NodeRuntimes = []string{"runc", "crun", "youki", "runsc", "gvisor", "kata", "sysbox-runc", "runhcs",
	"wasmtime", "wasmedge", "wasmer", "spin", "slight", "lunatic", "crun-wasm"}

// IsNodeRuntime reports whether name is a handler the nodes have for another runtime
// (NodeRuntimes, or kata-<hypervisor>).
func IsNodeRuntime(name string) bool {
	return slices.Contains(NodeRuntimes, name) || strings.HasPrefix(name, "kata-")
}

// NodeRuntimeError is why a handler name of another runtime is refused; field names where it
// was found.
func NodeRuntimeError(field, name string) error {
	who := "every pod that uses it"
	if name == "runc" {
		who = "every pod on the GPU nodes (runc is containerd's default runtime)"
	}
	return fmt.Errorf("%s %q is a runtime the nodes already have: the drop-in would point containerd's %q handler at nvidia-container-runtime, so %s would run through it; set spec.toolkit.runtimeClassName to a name of its own (the default is \"nvidia\") and re-render", field, name, name, who)
}
