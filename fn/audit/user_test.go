package audit

import (
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/render"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// The report says who runs as root: the rendered stack states uid 0 exactly for the
// device plugin, the exporter and the privileged toolkit containers, and the summary table
// and count show it.
func TestRootIsVisible(t *testing.T) {
	r := buildReport(t, "testdata/policy.yaml")
	root := map[string]bool{}
	for _, w := range r.Workloads {
		for _, c := range w.Containers {
			if c.RunAsUser == nil {
				t.Errorf("%s/%s states no uid", w.Name, c.Name)
			} else if *c.RunAsUser == 0 {
				root[w.Name+"/"+c.Name] = true
			}
		}
	}
	want := []string{render.NameToolkit + "/toolkit-copy", render.NameToolkit + "/install",
		render.NameDevicePlugin + "/device-plugin", render.NameExporter + "/exporter"}
	for _, k := range want {
		if !root[k] {
			t.Errorf("%s should run as root (uid 0); root: %v", k, root)
		}
	}
	md := string(r.Markdown())
	if !strings.Contains(md, "| DaemonSet gpu-exporter | `exporter` | no | **root** |") ||
		!strings.Contains(md, "| DaemonSet gpu-node-agent | `gate` | no | uid 65532 |") {
		t.Errorf("summary table lacks the user column:\n%s", md[:min(len(md), 2000)])
	}
	if _, _, n, _, _ := r.counts(); n < len(want) || !strings.Contains(md, " running as root (uid 0)") {
		t.Errorf("root count %d", n)
	}
}

// The toolkit installer's --cdi-spec file is named among its host writes.
func TestCDISpecWriteIsNamed(t *testing.T) {
	r := buildReport(t, "testdata/policy.yaml")
	for _, w := range r.Workloads {
		for _, c := range w.Containers {
			if c.Name != "install" {
				continue
			}
			for _, hw := range c.HostWrites {
				if hw.Path == config.CDISpecFile && strings.Contains(hw.Reason, "CDI spec") {
					return
				}
			}
			t.Fatalf("install writes %+v, want %s", c.HostWrites, config.CDISpecFile)
		}
	}
	t.Fatal("no toolkit install container")
}
