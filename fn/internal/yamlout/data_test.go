package yamlout_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/randfill"

	"github.com/gpupolicy/gpupolicy/fn/internal/yamlout"
	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// sameAsJSON fails unless Map(v) is what json.Marshal and back makes of v: the same data, or
// an error from both.
func sameAsJSON(t *testing.T, what string, v any) {
	t.Helper()
	got, gotErr := yamlout.Map(v)
	want, wantErr := yamlout.MapViaJSON(v)
	if (gotErr != nil) != (wantErr != nil) {
		t.Fatalf("%s: Map error %v, through encoding/json %v", what, gotErr, wantErr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: Map differs from json.Marshal and back\n got: %#v\nwant: %#v", what, got, want)
	}
	if gotErr != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte(`\ufffd`)) {
		return // invalid UTF-8: JSONSize counts U+FFFD's 3 bytes, not its escape's 6 (see JSONSize)
	}
	if n, err := yamlout.JSONSize(v); err != nil || n != len(b) {
		t.Fatalf("%s: JSONSize %d, %v; json.Marshal wrote %d bytes", what, n, err, len(b))
	}
}

// Every object the repository's policies render (the goldens' inputs, the presets, the
// examples) comes out of the walk exactly as out of encoding/json.
func TestMapOfRenderedObjectsIsJSONs(t *testing.T) {
	var files []string
	for _, glob := range []string{"../../render/testdata/*/policy.yaml", "../../testdata/*/policy.yaml",
		"../../../policies/*.yaml", "../../../examples/*/gpupolicy.yaml"} {
		m, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 10 {
		t.Fatalf("found only %d policies: %v", len(files), files)
	}
	objects := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		_, objs, res := pipeline.Load(b, validate.Options{Now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)})
		if res.HasErrors() {
			continue // an invalid-input case renders nothing
		}
		for _, o := range objs {
			sameAsJSON(t, f+": "+o.String(), o.Obj)
			objects++
		}
	}
	if objects < 100 {
		t.Fatalf("compared only %d rendered objects", objects)
	}
}

// API objects filled at random, every field a render could set and many it never does
// (strings that are not UTF-8, large unsigned numbers, empty and nil collections, embedded
// and omitzero fields), agree with encoding/json too.
func TestMapOfRandomAPIObjectsIsJSONs(t *testing.T) {
	fill := randfill.NewWithSeed(18).NilChance(0.3).NumElements(0, 2).MaxDepth(12).Funcs(
		// Quantity and RawExtension hold unexported state randfill cannot set; give them
		// values whose MarshalJSON works, as a render's would.
		func(q *resource.Quantity, c randfill.Continue) {
			*q = *resource.NewMilliQuantity(int64(c.Uint64()%1e6), resource.DecimalSI)
		},
		func(r *runtime.RawExtension, c randfill.Continue) {
			if c.Bool() {
				r.Raw = []byte(`{"a":[1,2.5,"x"],"b":null}`)
			}
		},
		func(tm *metav1.Time, c randfill.Continue) {
			if c.Bool() {
				*tm = metav1.Date(2026, 12, 2, 3, 4, 5, 0, time.UTC)
			}
		},
		func(s *string, c randfill.Continue) {
			*s = c.String(8)
			if c.Uint64()%8 == 0 {
				*s += "\xff<&>" // invalid UTF-8 and HTML-escaped characters
			}
		},
	)
	for i := range 40 {
		for _, v := range []any{
			&appsv1.DaemonSet{}, &appsv1.Deployment{}, &corev1.ConfigMap{}, &corev1.Pod{},
			&corev1.Node{}, &nodev1.RuntimeClass{}, &rbacv1.ClusterRole{},
			&admissionregistrationv1.ValidatingAdmissionPolicy{}, &metav1.APIResourceList{},
		} {
			fill.Fill(v)
			sameAsJSON(t, reflect.TypeOf(v).String()+" #"+string(rune('0'+i%10)), v)
		}
	}
}

// byAddress marshals through its pointer: encoding/json uses the method where the value is
// addressable (a field reached through a pointer) and the plain struct where it is not (a
// map's value).
type byAddress struct{ N int }

func (*byAddress) MarshalJSON() ([]byte, error) { return []byte(`"by address"`), nil }

// The walk's own cases: the rules of encoding/json it re-implements, and the shapes it leaves
// to encoding/json.
func TestMapFollowsEncodingJSON(t *testing.T) {
	type inner struct {
		A string `json:"a,omitempty"`
		B int
	}
	type collide struct {
		inner
		X string `json:"a"`
	}
	type Inner struct {
		C []int  `json:"c"`
		D []byte `json:"d,omitempty"`
	}
	type withEmbedded struct {
		*Inner
		metav1.TypeMeta `json:",inline"`
		E               map[string]any `json:"e,omitzero"`
		F               uint64         `json:"f"`
		G               float32        `json:"g,omitempty"`
		H               *int           `json:"h"`
		I               [2]bool        `json:"i"`
		J               metav1.Time    `json:"j,omitzero"`
		K               map[int]string `json:"k,omitempty"`
		L               int            `json:"l,string"`
		skip            int
		Dash            int `json:"-"`
		Named           inner
	}
	one := 1
	for i, v := range []any{
		&withEmbedded{},
		&withEmbedded{Inner: &Inner{C: []int{}, D: []byte("hi")}, F: 1 << 63, G: 0.1, H: &one,
			J: metav1.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), K: map[int]string{2: "x"}, L: 5, skip: 1,
			Named: inner{A: "a"}},
		&collide{inner: inner{A: "hidden"}, X: "shown"},
		&struct{ M map[string]float64 }{M: map[string]float64{"x": 2, "y": 1e21}},
		&struct {
			A byAddress
			M map[string]byAddress
		}{A: byAddress{1}, M: map[string]byAddress{"m": {2}}},
	} {
		sameAsJSON(t, "case "+string(rune('0'+i)), v)
	}
}
