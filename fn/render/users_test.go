package render_test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/render"
)

// rootContainers must say uid 0: the image's default user is 65532, and neither privileged
// nor a hostPath changes that. device-plugin and exporter stay unprivileged root.
var rootContainers = map[string]bool{"device-plugin": true, "dra-plugin": true, "mig-manager": true, "mps-control-daemon": true, "exporter": true, "install": true, "toolkit-copy": true, "nvidia-driver": true}

// nonRootContainers only read world-readable host files and keep the image's non-root user.
var nonRootContainers = map[string]bool{"gate": true, "driver-upgrade": true, "driver-validator": true, "labels": true, "discover": true}

// nvmlContainers read the GPUs through the runtime class.
var nvmlContainers = map[string]bool{"device-plugin": true, "mig-manager": true, "exporter": true, "labels": true}

// computeContainers read the GPUs and run NVIDIA's MPS programs (and nvidia-smi) through the
// runtime class: capabilities compute,utility.
var computeContainers = map[string]bool{"mps-control-daemon": true, "dra-plugin": true}

// TestContainerUsers: every rendered container states its uid, root exactly where a root-owned
// host file or socket demands it, and the unprivileged root containers stay without
// capabilities, privilege escalation or a writable root filesystem.
func TestContainerUsers(t *testing.T) {
	seen := map[string]bool{}
	eachDaemonSet(t, func(name string, _ *v1alpha1.GPUPolicy, o render.Object, ds *appsv1.DaemonSet) {
		spec := ds.Spec.Template.Spec
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			seen[c.Name] = true
			sc := c.SecurityContext
			if sc == nil || sc.RunAsUser == nil {
				t.Errorf("%s %s: container %s does not state its uid", name, o, c.Name)
				continue
			}
			uid := *sc.RunAsUser
			switch {
			case rootContainers[c.Name]:
				if uid != 0 || (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) {
					t.Errorf("%s %s: container %s runs as uid %d, want 0", name, o, c.Name, uid)
				}
			case nonRootContainers[c.Name]:
				if uid == 0 || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
					t.Errorf("%s %s: container %s must run non-root, got uid %d", name, o, c.Name, uid)
				}
			default:
				t.Errorf("%s %s: container %s is in neither list; decide its uid", name, o, c.Name)
			}
			if c.Name == "device-plugin" || c.Name == "dra-plugin" || c.Name == "exporter" || c.Name == "mps-control-daemon" { // mig-manager adds CAP_SYS_ADMIN (mig.go)
				unprivilegedRoot(t, name+" "+o.String()+" "+c.Name, sc)
			}
			if computeContainers[c.Name] {
				// NVIDIA's own: NVML ("utility") and the driver's MPS programs ("compute").
				if env := envMap(c.Env); env["NVIDIA_VISIBLE_DEVICES"] != "all" || env["NVIDIA_DRIVER_CAPABILITIES"] != "compute,utility" {
					t.Errorf("%s %s: container %s env %v, want all GPUs with compute,utility", name, o, c.Name, env)
				}
			} else if nvmlContainers[c.Name] != hasNVMLEnv(c.Env) {
				t.Errorf("%s %s: container %s: NVML env present = %v, want %v", name, o, c.Name, hasNVMLEnv(c.Env), nvmlContainers[c.Name])
			}
		}
	})
	for _, c := range []string{"device-plugin", "dra-plugin", "mig-manager", "mps-control-daemon", "exporter", "install", "toolkit-copy", "nvidia-driver", "gate", "driver-validator", "labels"} {
		if !seen[c] {
			t.Errorf("no golden case renders container %s", c)
		}
	}
}

func unprivilegedRoot(t *testing.T, what string, sc *corev1.SecurityContext) {
	t.Helper()
	if sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || len(sc.Capabilities.Add) > 0 || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("%s: root must come without privilege, escalation, capabilities or a writable root: %+v", what, sc)
	}
}

// hasNVMLEnv: the nvidia runtime injects libnvidia-ml and the device nodes only when asked.
func hasNVMLEnv(env []corev1.EnvVar) bool {
	want := map[string]string{"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility"}
	n := 0
	for _, e := range env {
		if v, ok := want[e.Name]; ok && e.Value == v {
			n++
		}
	}
	return n == len(want)
}

func envMap(env []corev1.EnvVar) map[string]string {
	out := map[string]string{}
	for _, e := range env {
		out[e.Name] = e.Value
	}
	return out
}
