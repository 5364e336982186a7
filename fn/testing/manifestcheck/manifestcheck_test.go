package manifestcheck

import (
	"strings"
	"testing"
)

const daemonSet = `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: ds, namespace: gpu-system}
spec:
  selector: {matchLabels: {app: ds}}
  template:
    metadata: {labels: {app: ds}}
    spec:
      containers: [{name: c, image: x:1}]
`

func TestDecodeStrict(t *testing.T) {
	for name, c := range map[string]struct {
		doc     string
		wantErr string
	}{
		"valid":         {daemonSet, ""},
		"unknown field": {strings.Replace(daemonSet, "image: x:1", "image: x:1, imagePolicy: Always", 1), `unknown field "spec.template.spec.containers[0].imagePolicy"`},
		"wrong case":    {strings.Replace(daemonSet, "matchLabels", "MatchLabels", 1), "MatchLabels"},
		"duplicate key": {strings.Replace(daemonSet, "namespace: gpu-system", "namespace: gpu-system, name: other", 1), "already set"},
		"wrong type":    {strings.Replace(daemonSet, "containers: [{name: c, image: x:1}]", "containers: {name: c}", 1), "containers"},
		"unknown kind":  {"apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n", "neither a k8s.io/api kind"},
		"crd kind":      {"apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: m}\nspec: {}\n", ""},
		"missing name":  {"apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n", "metadata.name is empty"},
	} {
		_, err := Decode([]byte(c.doc))
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: error %v, want it to contain %q", name, err, c.wantErr)
		}
	}
}

func TestDecodeAllSkipsEmptyDocuments(t *testing.T) {
	objs, errs := DecodeAll([]byte("# header\n---\n" + daemonSet + "---\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: ns}\n"))
	if len(errs) > 0 || len(objs) != 2 {
		t.Fatalf("objs %d errs %v", len(objs), errs)
	}
}

func dropInObjects(t *testing.T, toml string) []Object {
	t.Helper()
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: gpu-containerd-drop-in, namespace: gpu-system}\ndata:\n  99-gpupolicy-nvidia.toml: |\n")
	for _, l := range strings.Split(toml, "\n") {
		b.WriteString("    " + l + "\n")
	}
	objs, errs := DecodeAll([]byte(b.String()))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return objs
}

func TestCheckDropIn(t *testing.T) {
	v2 := "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\nruntime_type = \"io.containerd.runc.v2\""
	v3 := "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia]\nruntime_type = \"io.containerd.runc.v2\""
	for name, c := range map[string]struct {
		toml, minor, handler, wantErr string
	}{
		"v2 for 1.7":      {v2, "1.7", "nvidia", ""},
		"v3 for 2.1":      {v3, "2.1", "nvidia", ""},
		"v2 for 2.0":      {v2, "2.0", "nvidia", "reads config version 3"},
		"v3 for 1.6":      {v3, "1.6", "nvidia", "reads config version 2"},
		"missing handler": {v3, "2.1", "nvidia-cdi", `handler "nvidia-cdi" missing`},
		"broken toml":     {"version = ", "2.1", "nvidia", "not valid TOML"},
	} {
		err := CheckDropIn(dropInObjects(t, c.toml), c.minor, c.handler)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: error %v, want it to contain %q", name, err, c.wantErr)
		}
	}
}
