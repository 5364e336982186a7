package matrix

import (
	"fmt"
	"go/format"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/testing/goldentree"
)

// TestTableIsMatrixYAML: table.go is matrix.yaml, loaded strictly and checked (Load), as a Go
// literal. The facts stay reviewed as data in matrix.yaml; the binary carries them compiled
// in, so no process parses YAML (and pays encoding/json's reflection) for them. Rewrite with
// go test ./fn/validate/matrix -update (make update-rendered).
func TestTableIsMatrixYAML(t *testing.T) {
	b, err := os.ReadFile("matrix.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load(b)
	if err != nil {
		t.Fatalf("matrix.yaml: %v", err)
	}
	var src strings.Builder
	src.WriteString("// Code generated from matrix.yaml by TestTableIsMatrixYAML (go test ./fn/validate/matrix -update); DO NOT EDIT.\n\npackage matrix\n\nvar table = ")
	literal(&src, reflect.ValueOf(m).Elem(), false)
	src.WriteString("\n")
	out, err := format.Source([]byte(src.String()))
	if err != nil {
		t.Fatalf("generated source: %v\n%s", err, src.String())
	}
	goldentree.File(t, "table.go", out, *update)
	if !reflect.DeepEqual(Default(), m) {
		t.Fatal("the compiled table differs from matrix.yaml: run go test ./fn/validate/matrix -update")
	}
}

// literal writes v as a Go composite literal of this package's types, one field per line;
// elide leaves out the type of a slice's element, as gofmt -s does.
func literal(b *strings.Builder, v reflect.Value, elide bool) {
	switch v.Kind() {
	case reflect.Struct:
		if !elide {
			b.WriteString(v.Type().Name())
		}
		b.WriteString("{\n")
		for i := range v.NumField() {
			if v.Field(i).IsZero() {
				continue
			}
			b.WriteString(v.Type().Field(i).Name + ": ")
			literal(b, v.Field(i), false)
			b.WriteString(",\n")
		}
		b.WriteString("}")
	case reflect.Slice:
		b.WriteString("[]" + v.Type().Elem().Name() + "{\n")
		for i := range v.Len() {
			literal(b, v.Index(i), true)
			b.WriteString(",\n")
		}
		b.WriteString("}")
	case reflect.String:
		b.WriteString(strconv.Quote(v.String()))
	case reflect.Int, reflect.Bool:
		fmt.Fprint(b, v.Interface())
	default:
		panic("matrix: no Go literal for " + v.Type().String())
	}
}
