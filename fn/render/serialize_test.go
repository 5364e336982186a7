package render_test

import (
	"bytes"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/render"
)

// TestWritersLeaveRenderedDataAlone: the writers use the data render kept from its size check;
// annotating the KRM items must not change it (a second write is byte-identical and carries
// no annotation of the first), and Map is a fresh copy a caller may edit without changing
// what is written.
func TestWritersLeaveRenderedDataAlone(t *testing.T) {
	_, objs := load(t, "default")
	fresh := func(objs render.Objects) []byte {
		var out []byte
		for _, o := range objs {
			b, err := o.YAML()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b...)
		}
		return out
	}
	before := fresh(objs)
	first, err := objs.AppendItems(nil, func(o render.Object) map[string]string { return map[string]string{"first": o.Path()} })
	if err != nil {
		t.Fatal(err)
	}
	again, err := objs.AppendItems(nil, func(o render.Object) map[string]string { return map[string]string{"second": "x"} })
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(again, []byte("first:")) || !bytes.Contains(first, []byte("first:")) || !bytes.Contains(again, []byte("second: x")) {
		t.Fatal("an AppendItems annotation leaked into the kept data or is missing")
	}
	for _, o := range objs {
		m, err := o.Map()
		if err != nil {
			t.Fatal(err)
		}
		m["metadata"].(map[string]any)["name"] = "edited"
	}
	if after := fresh(objs); !bytes.Equal(before, after) {
		t.Fatal("the objects' YAML changed after AppendItems or an edit of Map's result")
	}
	stream, err := objs.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(stream, []byte("edited")) || bytes.Contains(stream, []byte("first:")) {
		t.Fatal("Objects.YAML writes an edit of Map's result or an AppendItems annotation")
	}
}
