package doctor

import (
	"bytes"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/gpupolicy/gpupolicy/fn/source"
)

// loadScenario decodes a multi-document YAML of typed objects for a fake clientset.
func loadScenario(t *testing.T, path string) []runtime.Object {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := source.Decode(path, data)
	if err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	for _, d := range docs {
		raw, err := d.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(raw, nil, nil)
		if err != nil {
			t.Fatalf("%s: %s %s: %v", path, d.GetKind(), d.GetName(), err)
		}
		objs = append(objs, obj)
	}
	return objs
}

// TestReadmeScenario is the output the README's "Why is my GPU pod Pending?" section shows.
func TestReadmeScenario(t *testing.T) {
	objs := loadScenario(t, "testdata/scenario/cluster.yaml")
	r := diagnoseCase(t, "readme", Input{}, objs)
	if len(r.Pods) != 1 || r.Pods[0].FailedGate != PodGateGPUResource || r.Pods[0].Finding.Fix[:9] != "on gpu-b:" {
		t.Errorf("ml/train: want gpu-resource with the fix on gpu-b, got %+v", r.Pods)
	}
	diagnoseCase(t, "readme-pod", Input{Pod: "ml/train"}, objs)
	diagnoseCase(t, "readme-node", Input{Node: "gpu-c"}, objs)
}

// TestReadmeShowsTheGolden: the README's doctor example is readme.table, byte for byte.
func TestReadmeShowsTheGolden(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	gold, err := os.ReadFile("testdata/readme.table")
	if err != nil {
		t.Fatal(err)
	}
	const cmd = "```\n$ gpupolicy-fn doctor\n"
	if !bytes.Contains(readme, append([]byte(cmd), append(gold, "```"...)...)) {
		t.Error("the README's `gpupolicy-fn doctor` example differs from fn/doctor/testdata/readme.table: copy the golden into it")
	}
}
