package v1alpha1

import (
	"reflect"
	"testing"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// FuzzMergeKeysAsKyaml: whenever kustomize's reading of a document (kyaml's DeAnchor, which
// expands aliases and merge keys) and the document itself both decode, they decode to the
// same policy, so `render -f` and the KRM function under kustomize agree. Run:
// go test ./fn/api/v1alpha1 -run '^$' -fuzz FuzzMergeKeysAsKyaml -parallel 1
func FuzzMergeKeysAsKyaml(f *testing.F) {
	f.Add([]byte(mergePolicy))
	f.Add([]byte(minimal + "  toolkit: &t {cdi: false}\n  exporter: {<<: [{port: 9500}, {port: 9600, interval: 30s}], enabled: true}\n"))
	f.Add([]byte(minimal + "  nodeSelector: {<<: &a {x: \"1\"}, y: \"2\"}\n  nodePools: [{name: a, nodeSelector: *a}, {name: b, nodeSelector: {<<: *a, x: \"3\"}}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Decode(data)
		if err != nil {
			return
		}
		rn, err := kyaml.Parse(string(data))
		if err != nil || rn.DeAnchor() != nil {
			return
		}
		text, err := rn.String()
		if err != nil {
			return
		}
		want, err := Decode([]byte(text))
		if err != nil {
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decoded differently from kyaml's expansion:\n got %+v\nwant %+v\nkyaml:\n%s", got.Spec, want.Spec, text)
		}
	})
}
