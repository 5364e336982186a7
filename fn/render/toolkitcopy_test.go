package render_test

import (
	"strings"
	"testing"
)

// NVIDIA's installer copies binaries only: it must neither restart containerd nor see any of
// the host's containerd configuration, whatever flag names its release understands.
func TestToolkitCopyCannotTouchContainerd(t *testing.T) {
	ds := toolkitDS(t, "  driver: {version: \"580.95.05\"}\n  toolkit: {source: container}\n")
	c := container(&ds.Spec.Template.Spec, "toolkit-copy")
	if c == nil {
		t.Fatal("no toolkit-copy init container for toolkit.source=container")
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	for k, want := range map[string]string{"RUNTIME_RESTART_MODE": "none", "NO_RUNTIME_CONFIG": "true", "NO_DAEMON": "true"} {
		if env[k] != want {
			t.Errorf("env %s = %q, want %q", k, env[k], want)
		}
	}
	vols := map[string]bool{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		vols[v.Name] = v.EmptyDir != nil
	}
	for _, m := range c.VolumeMounts {
		if strings.Contains(m.MountPath, "containerd") || strings.HasPrefix(m.MountPath, "/run/containerd") {
			t.Errorf("toolkit-copy mounts %s: it must not see containerd's config or socket", m.MountPath)
		}
		if strings.HasPrefix(env["RUNTIME_CONFIG"], m.MountPath+"/") && !vols[m.Name] {
			t.Errorf("RUNTIME_CONFIG %s is on volume %s, which is not pod-local scratch", env["RUNTIME_CONFIG"], m.Name)
		}
	}
	if env["RUNTIME_CONFIG"] == "" || env["CONTAINERD_CONFIG"] != env["RUNTIME_CONFIG"] {
		t.Errorf("RUNTIME_CONFIG/CONTAINERD_CONFIG = %q/%q, want one scratch file", env["RUNTIME_CONFIG"], env["CONTAINERD_CONFIG"])
	}
}
