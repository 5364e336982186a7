package render_test

import (
	"strings"
	"testing"

	toml "github.com/pelletier/go-toml/v2"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/render"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// crdKinds have no Go types in k8s.io/api; their required fields are checked by hand.
var crdKinds = map[schema.GroupVersionKind][]string{
	{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"}:  {"spec.selector", "spec.endpoints"},
	{Group: "monitoring.coreos.com", Version: "v1", Kind: "PrometheusRule"}:  {"spec.groups"},
	{Group: "nfd.k8s-sigs.io", Version: "v1alpha1", Kind: "NodeFeatureRule"}: {"spec.rules"},
}

// TestStrictDecode decodes every rendered object of every case, as written, strictly into its
// k8s.io/api type: an unknown or misspelled field, a wrong type or a duplicate key fails.
func TestStrictDecode(t *testing.T) {
	for _, name := range cases(t) {
		_, objs := load(t, name)
		for _, o := range objs {
			y, err := o.YAML()
			if err != nil {
				t.Fatal(err)
			}
			gvk := o.Obj.GetObjectKind().GroupVersionKind()
			if fields, ok := crdKinds[gvk]; ok {
				var m map[string]any
				if err := yaml.UnmarshalStrict(y, &m); err != nil {
					t.Errorf("%s %s: %v", name, o, err)
				}
				for _, f := range fields {
					if !hasPath(m, strings.Split(f, ".")) {
						t.Errorf("%s %s: missing %s", name, o, f)
					}
				}
				continue
			}
			typed, err := scheme.Scheme.New(gvk)
			if err != nil {
				t.Errorf("%s %s: %v", name, o, err)
				continue
			}
			if err := yaml.UnmarshalStrict(y, typed); err != nil {
				t.Errorf("%s %s does not decode strictly into %T: %v", name, o, typed, err)
			}
		}
	}
}

func hasPath(m map[string]any, path []string) bool {
	v, ok := m[path[0]]
	if !ok || len(path) == 1 {
		return ok
	}
	sub, ok := v.(map[string]any)
	return ok && hasPath(sub, path[1:])
}

// TestDropInTOML parses the drop-in of every case as TOML and checks the config version, the
// handler, the binary and CDI against the policy.
func TestDropInTOML(t *testing.T) {
	for _, name := range cases(t) {
		p, objs := load(t, name)
		var text string
		for _, o := range objs {
			if cm, ok := o.Obj.(*corev1.ConfigMap); ok && cm.Name == config.DropInConfigMap {
				text = cm.Data[config.DropInFile]
			}
		}
		var doc map[string]any
		if err := toml.Unmarshal([]byte(text), &doc); err != nil {
			t.Fatalf("%s: the drop-in is not TOML: %v\n%s", name, err, text)
		}
		wantVersion, err := render.ConfigVersion(p.Spec.ContainerRuntime.Version)
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := doc["version"].(int64); int(v) != wantVersion {
			t.Errorf("%s: version = %v, want %d", name, doc["version"], wantVersion)
		}
		plugin := "io.containerd.cri.v1.runtime"
		if wantVersion == 2 {
			plugin = "io.containerd.grpc.v1.cri"
		}
		cri := dig(t, doc, "plugins", plugin)
		handler := p.Spec.Toolkit.RuntimeClassName
		runtime := dig(t, cri, "containerd", "runtimes", handler)
		if runtime["runtime_type"] != "io.containerd.runc.v2" {
			t.Errorf("%s: runtime_type = %v", name, runtime["runtime_type"])
		}
		bin := dig(t, runtime, "options")["BinaryName"]
		wantBin := "/usr/local/nvidia/toolkit/nvidia-container-runtime"
		if p.Spec.Toolkit.Source == "preinstalled" {
			wantBin = "/usr/bin/nvidia-container-runtime"
		}
		if bin != wantBin {
			t.Errorf("%s: BinaryName = %v, want %s", name, bin, wantBin)
		}
		if cdi := *p.Spec.Toolkit.CDI; (cri["enable_cdi"] == true) != cdi {
			t.Errorf("%s: enable_cdi = %v, toolkit.cdi = %v", name, cri["enable_cdi"], cdi)
		}
		def, _ := cri["containerd"].(map[string]any)["default_runtime_name"].(string)
		if (def == handler) != *p.Spec.Toolkit.SetAsDefault {
			t.Errorf("%s: default_runtime_name = %q, setAsDefault = %v", name, def, *p.Spec.Toolkit.SetAsDefault)
		}
	}
}

func dig(t *testing.T, m map[string]any, keys ...string) map[string]any {
	t.Helper()
	for _, k := range keys {
		next, ok := m[k].(map[string]any)
		if !ok {
			t.Fatalf("no table %q in %v", k, m)
		}
		m = next
	}
	return m
}

// TestLeastPrivilege: only the driver container (nvidia-driver) and the toolkit stage's
// containers (toolkit-copy, install) are privileged or
// use hostPID; every DaemonSet tolerates, carries the priority class and gates on its stage.
func TestLeastPrivilege(t *testing.T) {
	mayPrivilege := map[string]bool{"nvidia-driver": true, "install": true, "toolkit-copy": true}
	eachDaemonSet(t, func(name string, p *v1alpha1.GPUPolicy, o render.Object, ds *appsv1.DaemonSet) {
		spec := ds.Spec.Template.Spec
		if len(spec.Tolerations) == 0 || spec.PriorityClassName != p.Spec.PriorityClassName {
			t.Errorf("%s %s: tolerations %v, priority class %q", name, o, spec.Tolerations, spec.PriorityClassName)
		}
		if len(spec.ImagePullSecrets) != len(p.Spec.ImagePullSecrets) {
			t.Errorf("%s %s: pull secrets %v", name, o, spec.ImagePullSecrets)
		}
		privileged := false
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			if c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged {
				privileged = true
				if !mayPrivilege[c.Name] {
					t.Errorf("%s %s: container %s is privileged", name, o, c.Name)
				}
			}
			if c.Resources.Requests.Memory().IsZero() {
				t.Errorf("%s %s: container %s has no memory request", name, o, c.Name)
			}
		}
		if spec.HostPID && !privileged {
			t.Errorf("%s %s: hostPID without needing it", name, o)
		}
		switch {
		case strings.HasPrefix(ds.Name, render.NameDevicePlugin), ds.Name == render.NameExporter, ds.Name == render.NameFeatureDiscovery:
			if privileged || spec.RuntimeClassName == nil || *spec.RuntimeClassName != p.Spec.Toolkit.RuntimeClassName {
				t.Errorf("%s %s: must run unprivileged under runtime class %s", name, o, p.Spec.Toolkit.RuntimeClassName)
			}
		}
		if ds.Name == render.NameDriver && ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType {
			t.Errorf("%s: the driver DaemonSet must update OnDelete", name)
		}
	})
}
