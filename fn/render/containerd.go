package render

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// cdiSpecDirs are where nvidia-ctk (static specs) and the toolkit installer (generated specs)
// put CDI specs; containerd's own default list.
var cdiSpecDirs = []string{"/etc/cdi", "/var/run/cdi"}

// ConfigVersion is the containerd config version of a containerd minor ("1.7" → 2, "2.1" → 3).
func ConfigVersion(containerdVersion string) (int, error) {
	major, _, _ := strings.Cut(containerdVersion, ".")
	if major == "1" || major == "2" {
		m, _ := strconv.Atoi(major)
		return config.ContainerdConfigVersion(m), nil
	}
	return 0, fmt.Errorf("containerd %q: only 1.6, 1.7 and 2.x are supported", containerdVersion)
}

// containerdDropIn renders the drop-in that `gpu-node-agent toolkit install` writes into
// containerRuntime.dropInDir: the runtime handler named toolkit.runtimeClassName running
// nvidia-container-runtime, CDI when toolkit.cdi, and the default runtime when
// toolkit.setAsDefault. Only what gpupolicy owns is here; the installer starts the handler from
// the node's runc runtime and merges the node's own CRI settings where containerd < 2.1 would
// otherwise drop them on import.
func containerdDropIn(p *v1alpha1.GPUPolicy) (string, error) {
	cr := &p.Spec.ContainerRuntime
	t := &p.Spec.Toolkit
	version, err := ConfigVersion(cr.Version)
	if err != nil {
		return "", v1alpha1.FieldErrors{field.Invalid(field.NewPath("spec", "containerRuntime", "version"), cr.Version, err.Error())}
	}
	cri := `plugins."` + config.CRIRuntimePlugin(version) + `"`
	handler := tomlKey(t.RuntimeClassName)

	var b strings.Builder
	fmt.Fprintf(&b, "# containerd drop-in of GPUPolicy %q for containerd %s (config version %d).\n", p.Metadata.Name, cr.Version, version)
	fmt.Fprintf(&b, "# Rendered by gpupolicy-fn; installed by `gpu-node-agent toolkit install` into %s.\n", cr.DropInDir)
	fmt.Fprintf(&b, "version = %d\n", version)
	if v1alpha1.Bool(t.CDI) {
		fmt.Fprintf(&b, "\n[%s]\n", cri)
		fmt.Fprintf(&b, "  enable_cdi = true\n")
		fmt.Fprintf(&b, "  cdi_spec_dirs = %s\n", tomlStrings(cdiSpecDirs))
	}
	if v1alpha1.Bool(t.SetAsDefault) {
		fmt.Fprintf(&b, "\n[%s.containerd]\n", cri)
		fmt.Fprintf(&b, "  default_runtime_name = %s\n", tomlString(t.RuntimeClassName))
	}
	fmt.Fprintf(&b, "\n# On each node the agent starts this handler from a copy of the node's own runc runtime (its\n")
	fmt.Fprintf(&b, "# default runtime when that runs runc, else runc, else crun), as `nvidia-ctk runtime configure`\n")
	fmt.Fprintf(&b, "# does: SystemdCgroup and the node's other runc settings carry over; the keys below win.\n")
	fmt.Fprintf(&b, "[%s.containerd.runtimes.%s]\n", cri, handler)
	fmt.Fprintf(&b, "  runtime_type = %s\n", tomlString("io.containerd.runc.v2"))
	fmt.Fprintf(&b, "\n[%s.containerd.runtimes.%s.options]\n", cri, handler)
	fmt.Fprintf(&b, "  BinaryName = %s\n", tomlString(runtimePath(t)))
	return b.String(), nil
}

var bareKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// tomlKey quotes a key unless TOML allows it bare.
func tomlKey(k string) string {
	if bareKey.MatchString(k) {
		return k
	}
	return tomlString(k)
}

// tomlString is a TOML basic string (Go's %q escapes differ: \x, \a and \v are not TOML).
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func tomlStrings(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = tomlString(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
