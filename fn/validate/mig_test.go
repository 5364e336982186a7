package validate_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/plugin/mig"
)

// migPolicy is base with one MIG pool whose layouts are given as YAML under mig:.
func migPolicy(strategy, migYAML string) string {
	return base + "  nodePools:\n  - name: training\n    nodeSelector: {pool: training}\n" +
		"    devicePlugin: {migStrategy: " + strategy + "}\n    mig:\n" + migYAML
}

// Every profile of every model in the table, at its full count, is a valid layout for that
// model under both strategies that advertise MIG devices.
func TestMIGLayoutsOfTheTableAreValid(t *testing.T) {
	for _, name := range mig.ProductNames() {
		p := mig.Products[name]
		var b strings.Builder
		fmt.Fprintf(&b, "      gpuProduct: %s\n      layout: l0\n      layouts:\n", name)
		for i, pr := range p.Profiles {
			fmt.Fprintf(&b, "        l%d:\n        - devices: all\n          profiles: {%q: %d}\n", i, pr.Name, pr.Max)
		}
		for _, strategy := range []string{"single", "mixed"} {
			if res := load(t, migPolicy(strategy, b.String())); len(res) != 0 {
				t.Errorf("%s, %s:\n%s", name, strategy, res.Text("policy.yaml"))
			}
		}
	}
}

// The design's example: two layouts, one with GPUs left without MIG, devices as a list.
func TestMIGDesignExampleIsValid(t *testing.T) {
	doc := migPolicy("mixed", `      gpuProduct: NVIDIA-A100-SXM4-80GB
      layout: all-1g.10gb
      layouts:
        all-1g.10gb:
        - devices: all
          profiles: {"1g.10gb": 7}
        half:
        - devices: [0, 1, 2, 3]
          profiles: {"3g.40gb": 2}
        - devices: [4, 5, 6, 7]
          migEnabled: false
`)
	if res := load(t, doc); len(res) != 0 {
		t.Fatalf("want no results, got:\n%s", res.Text("policy.yaml"))
	}
	// single cannot advertise "half": it has GPUs with and without MIG.
	res := load(t, strings.Replace(doc, "migStrategy: mixed", "migStrategy: single", 1))
	if !has(res, want{"error", "spec.nodePools[0].devicePlugin.migStrategy", `layout "half" has GPUs with and without MIG`}) {
		t.Fatalf("single with a half-MIG layout accepted:\n%s", res.Text("policy.yaml"))
	}
}

// One layout needs no layout: field; the default is that layout.
func TestMIGSingleLayoutIsTheDefault(t *testing.T) {
	doc := migPolicy("mixed", "      layouts:\n        only:\n        - devices: all\n          profiles: {\"2g.20gb\": 3}\n")
	if res := load(t, doc); len(res) != 0 {
		t.Fatalf("want no results, got:\n%s", res.Text("policy.yaml"))
	}
}
