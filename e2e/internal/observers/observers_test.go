package observers

import (
	"strings"
	"testing"
)

// TestParse reads kube-state-metrics' exposition as it writes it (HELP/TYPE lines, label values
// with commas) and keeps only the named metrics.
func TestParse(t *testing.T) {
	in := `# HELP kube_node_status_condition The condition of a cluster node.
# TYPE kube_node_status_condition gauge
kube_node_status_condition{node="gpu-1",condition="GPUStackReady",status="false"} 1
kube_node_status_condition{node="gpu-1",condition="GPUStackReady",status="true"} 0
kube_daemonset_status_number_unavailable{namespace="gpu-system",daemonset="gpu-driver"} 2
kube_node_info{node="gpu-1",kernel_version="5.15.0",os_image="Ubuntu 22.04, LTS"} 1
`
	got, err := Parse(strings.NewReader(in), "kube_node_status_condition", "kube_daemonset_status_number_unavailable")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Labels["status"] != "false" || got[0].Value != 1 || got[2].Labels["daemonset"] != "gpu-driver" || got[2].Value != 2 ||
		got[0].Series != `kube_node_status_condition{node="gpu-1",condition="GPUStackReady",status="false"}` {
		t.Fatalf("got %+v", got)
	}
	all, err := Parse(strings.NewReader(in), "kube_node_info")
	if err != nil || len(all) != 1 || all[0].Labels["os_image"] != "Ubuntu 22.04, LTS" {
		t.Fatalf("a comma inside a label value: %+v (%v)", all, err)
	}
}
