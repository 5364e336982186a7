package toolkit

import (
	"encoding/json"
	"testing"
)

// differs against containerd's JSON: TOML keys match camel-case JSON keys, integers match
// JSON numbers, and every kind of difference names the key and both values.
func TestDiffersFromContainerdJSON(t *testing.T) {
	var have map[string]any
	if err := json.Unmarshal([]byte(`{"enableCDI": true, "cdiSpecDirs": ["/etc/cdi", "/var/run/cdi"], "maxConfNum": 1,
		"containerd": {"defaultRuntimeName": "runc", "runtimes": {"nvidia": {"runtimeType": "io.containerd.runc.v2",
		"PodAnnotations": null, "options": {"BinaryName": "/usr/bin/nvidia-container-runtime", "SystemdCgroup": true}}}}}`), &have); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		toml, want string
	}{
		{"enable_cdi = true\ncdi_spec_dirs = [\"/etc/cdi\", \"/var/run/cdi\"]\nmax_conf_num = 1\n[containerd.runtimes.nvidia]\nruntime_type = \"io.containerd.runc.v2\"\n[containerd.runtimes.nvidia.options]\nBinaryName = \"/usr/bin/nvidia-container-runtime\"\nSystemdCgroup = true\n", ""},
		{"enable_cdi = false\n", `the running containerd has p.enable_cdi = true, the drop-in sets false`},
		{"cdi_spec_dirs = [\"/etc/cdi\"]\n", `the running containerd has p.cdi_spec_dirs = ["/etc/cdi","/var/run/cdi"], the drop-in sets ["/etc/cdi"]`},
		{"max_conf_num = 2\n", `the running containerd has p.max_conf_num = 1, the drop-in sets 2`},
		{"[containerd]\ndefault_runtime_name = \"nvidia\"\n", `the running containerd has p.containerd.default_runtime_name = "runc", the drop-in sets "nvidia"`},
		{"[containerd.runtimes.nvidia.options]\nBinaryName = \"/x\"\n", `the running containerd has p.containerd.runtimes.nvidia.options.BinaryName = "/usr/bin/nvidia-container-runtime", the drop-in sets "/x"`},
		{"[containerd.runtimes.nvidia]\nsnapshotter = \"stargz\"\n", `the running containerd has no p.containerd.runtimes.nvidia.snapshotter (the drop-in sets "stargz")`},
		{"[containerd.runtimes.nvidia.pod_annotations]\na = \"b\"\n", `the running containerd has p.containerd.runtimes.nvidia.pod_annotations = null, the drop-in sets a table`},
	} {
		want := must(parseTOML("case", []byte(c.toml)))
		if got := differs("p", want, have); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.toml, got, c.want)
		}
	}
}
