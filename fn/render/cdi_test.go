package render_test

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/render"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

const cdiPolicyHead = `apiVersion: gpupolicy.dev/v1alpha1
kind: GPUPolicy
metadata: {name: fleet}
spec:
  kubernetesVersion: "1.34"
  cuda: {version: "12.8"}
`

// toolkitDS renders a policy (cdiPolicyHead + body) and returns its toolkit DaemonSet.
func toolkitDS(t *testing.T, body string) *appsv1.DaemonSet {
	t.Helper()
	_, objs, res := pipeline.Load([]byte(cdiPolicyHead+body), today)
	if res.HasErrors() {
		t.Fatalf("%s", res.Text("policy.yaml"))
	}
	for _, o := range objs {
		if ds, ok := o.Obj.(*appsv1.DaemonSet); ok && ds.Name == render.NameToolkit {
			return ds
		}
	}
	t.Fatal("no toolkit DaemonSet")
	return nil
}

func container(ps *corev1.PodSpec, name string) *corev1.Container {
	for _, cs := range [][]corev1.Container{ps.InitContainers, ps.Containers} {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i]
			}
		}
	}
	return nil
}

// flagValue is the value after flag in a command, "" when the flag is absent.
func flagValue(cmd []string, flag string) string {
	if i := slices.Index(cmd, flag); i >= 0 && i+1 < len(cmd) {
		return cmd[i+1]
	}
	return ""
}

// The installer generates the UUID-named CDI spec exactly when some device plugin uses
// cdi-cri (which needs toolkit.cdi), with the copied nvidia-ctk for source=container and the
// driver container's root, and gets the host's CDI directory read-write for it; the volume is
// shared with NVIDIA's toolkit-copy init container.
func TestToolkitCDISpec(t *testing.T) {
	cases := []struct {
		name, body             string
		spec, ctk, driverRoot  string
		installMount, copyInit bool
	}{
		{name: "defaults: container toolkit, cdi-cri", body: "  driver: {version: \"580.95.05\"}\n",
			spec: config.CDISpecFile, ctk: config.ToolkitInstallDir + "/nvidia-ctk", installMount: true, copyInit: true},
		{name: "envvar everywhere", body: "  driver: {version: \"580.95.05\"}\n  devicePlugin: {deviceListStrategy: envvar}\n", copyInit: true},
		{name: "a pool uses cdi-cri", body: "  driver: {version: \"580.95.05\"}\n  devicePlugin: {deviceListStrategy: envvar}\n" +
			"  nodePools:\n  - {name: a, nodeSelector: {pool: a}, devicePlugin: {deviceListStrategy: cdi-cri}}\n",
			spec: config.CDISpecFile, ctk: config.ToolkitInstallDir + "/nvidia-ctk", installMount: true, copyInit: true},
		{name: "cdi off", body: "  driver: {version: \"580.95.05\"}\n  toolkit: {cdi: false}\n  devicePlugin: {deviceListStrategy: envvar}\n", copyInit: true},
		{name: "preinstalled toolkit, driver container",
			body: "  driver: {source: container, version: \"580.95.05\", os: ubuntu22.04}\n  toolkit: {source: preinstalled}\n",
			spec: config.CDISpecFile, driverRoot: "/run/nvidia/driver", installMount: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ds := toolkitDS(t, c.body)
			ps := &ds.Spec.Template.Spec
			install := container(ps, "install")
			cmd := install.Command
			if got := flagValue(cmd, "--cdi-spec"); got != c.spec {
				t.Errorf("--cdi-spec %q, want %q (%v)", got, c.spec, cmd)
			}
			if got := flagValue(cmd, "--nvidia-ctk"); got != c.ctk {
				t.Errorf("--nvidia-ctk %q, want %q", got, c.ctk)
			}
			if got := flagValue(cmd, "--cdi-driver-root"); got != c.driverRoot {
				t.Errorf("--cdi-driver-root %q, want %q", got, c.driverRoot)
			}
			var vol *corev1.Volume
			names := map[string]bool{}
			for i, v := range ps.Volumes {
				if names[v.Name] {
					t.Errorf("volume %s twice", v.Name)
				}
				names[v.Name] = true
				if v.HostPath != nil && v.HostPath.Path == "/var/run/cdi" {
					vol = &ps.Volumes[i]
				}
			}
			mounted := func(ct *corev1.Container, at string) bool {
				return ct != nil && slices.ContainsFunc(ct.VolumeMounts, func(m corev1.VolumeMount) bool {
					return vol != nil && m.Name == vol.Name && m.MountPath == at && !m.ReadOnly
				})
			}
			if got := mounted(install, "/host/var/run/cdi"); got != c.installMount {
				t.Errorf("install mounts /var/run/cdi read-write at /host/var/run/cdi: %v, want %v", got, c.installMount)
			}
			if copyInit := container(ps, "toolkit-copy"); copyInit != nil && strings.Contains(c.body, "cdi: false") == mounted(copyInit, "/var/run/cdi") {
				t.Errorf("toolkit-copy CDI mount does not follow toolkit.cdi")
			}
			if (container(ps, "toolkit-copy") != nil) != c.copyInit {
				t.Errorf("toolkit-copy present: %v, want %v", !c.copyInit, c.copyInit)
			}
		})
	}
}
