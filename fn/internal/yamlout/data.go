package yamlout

import (
	"encoding"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// data is v as the JSON-compatible data decodeJSONObject makes of json.Marshal(v), reached by
// walking the value instead of writing and reading JSON text.
//
// Why: encoding/json builds its encoder for a type from the whole type graph at once, every
// field's type whether the value holds it or not. For a DaemonSet that is the complete PodSpec
// (thirty-odd volume sources, probes, security contexts, ...), and a gpupolicy-fn process pays
// that walk on its first object, a seventh of a KRM call's CPU (issue 18). This walk visits
// only the fields a value has and caches a struct's fields on first sight, so the types a
// render never fills are never looked at.
//
// It follows encoding/json's rules (json tags, omitempty, omitzero, embedded structs, []byte
// as base64, map keys) and hands every value it cannot settle that simply to encoding/json
// itself: types with MarshalJSON or MarshalText (metav1.Time, resource.Quantity, IntOrString,
// RawExtension), floats, strings that are not valid UTF-8, structs whose embedded fields
// collide or use ",string", other map keys and kinds JSON has no form for. The equivalence is
// tested on every rendered object and on randomly filled API objects (data_test.go).
func data(v reflect.Value) (any, error) {
	t := v.Type()
	ti := infoOf(t)
	if ti.marshals || ti.marshalsByAddr && v.CanAddr() {
		return viaJSON(v)
	}
	switch t.Kind() {
	case reflect.Bool:
		return v.Bool(), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int(), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if u := v.Uint(); u <= math.MaxInt64 {
			return int64(u), nil
		}
		return viaJSON(v) // read back as a float64, as decodeJSONObject does
	case reflect.String:
		if s := v.String(); utf8.ValidString(s) {
			return s, nil
		}
		return viaJSON(v) // encoding/json writes U+FFFD for the invalid bytes
	case reflect.Interface, reflect.Pointer:
		if v.IsNil() {
			return nil, nil
		}
		return data(v.Elem())
	case reflect.Struct:
		return structData(v)
	case reflect.Map:
		return mapData(v)
	case reflect.Slice:
		if v.IsNil() {
			return nil, nil
		}
		if e := infoOf(t.Elem()); t.Elem().Kind() == reflect.Uint8 && !e.marshals && !e.marshalsByAddr {
			return base64.StdEncoding.EncodeToString(v.Bytes()), nil
		}
		return listData(v)
	case reflect.Array:
		return listData(v)
	}
	return viaJSON(v) // floats, and the kinds encoding/json refuses with its own error
}

var (
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
	isZeroerType      = reflect.TypeFor[interface{ IsZero() bool }]()
)

// typeInfo is what data asks of a type on every value, asked once (reflect's Implements
// walks the method set each time).
type typeInfo struct {
	// marshals: encoding/json encodes the type through its MarshalJSON or MarshalText;
	// marshalsByAddr: through those methods of its pointer type, where the value is
	// addressable.
	marshals, marshalsByAddr bool
	fields                   structFields // of a struct type
}

var typeCache sync.Map // reflect.Type → *typeInfo

func infoOf(t reflect.Type) *typeInfo {
	if ti, ok := typeCache.Load(t); ok {
		return ti.(*typeInfo)
	}
	ti := &typeInfo{marshals: t.Implements(marshalerType) || t.Implements(textMarshalerType)}
	if !ti.marshals && t.Kind() != reflect.Pointer {
		pt := reflect.PointerTo(t)
		ti.marshalsByAddr = pt.Implements(marshalerType) || pt.Implements(textMarshalerType)
	}
	if t.Kind() == reflect.Struct && !ti.marshals {
		ti.fields = collectFields(t)
	}
	typeCache.Store(t, ti)
	return ti
}

// viaJSON is v through encoding/json and decodeJSON; an addressable value goes by its address
// so that methods on the pointer apply as they would inside the enclosing value.
func viaJSON(v reflect.Value) (any, error) {
	x := v.Interface()
	if v.CanAddr() {
		x = v.Addr().Interface()
	}
	j, err := json.Marshal(x)
	if err != nil {
		return nil, err
	}
	return decodeJSON(j)
}

func listData(v reflect.Value) (any, error) {
	s := make([]any, v.Len())
	for i := range s {
		x, err := data(v.Index(i))
		if err != nil {
			return nil, err
		}
		s[i] = x
	}
	return s, nil
}

func mapData(v reflect.Value) (any, error) {
	if v.IsNil() {
		return nil, nil
	}
	if v.Type().Key().Kind() != reflect.String {
		return viaJSON(v) // int and TextMarshaler keys: encoding/json's key rules
	}
	m := make(map[string]any, v.Len())
	for it := v.MapRange(); it.Next(); {
		k := it.Key().String() // a string kind is used as is, even with MarshalText
		if !utf8.ValidString(k) {
			return viaJSON(v)
		}
		x, err := data(it.Value())
		if err != nil {
			return nil, err
		}
		m[k] = x
	}
	return m, nil
}

func structData(v reflect.Value) (any, error) {
	fs := &infoOf(v.Type()).fields
	if fs.viaJSON {
		return viaJSON(v)
	}
	m := map[string]any{} // most of an API type's fields are empty and left out
	for _, f := range fs.list {
		fv, ok := fieldByIndex(v, f.index)
		if !ok {
			continue // inside a nil embedded pointer
		}
		if f.omitEmpty && isEmptyValue(fv) || f.omitZero && isZero(fv, f.zeroer) {
			continue
		}
		x, err := data(fv)
		if err != nil {
			return nil, err
		}
		m[f.name] = x
	}
	return m, nil
}

// fieldByIndex is v.FieldByIndex that reports a nil embedded pointer on the way instead of
// panicking (encoding/json leaves such fields out).
func fieldByIndex(v reflect.Value, index []int) (reflect.Value, bool) {
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}, false
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v, true
}

// isEmptyValue is encoding/json's omitempty test.
func isEmptyValue(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}

// How a field's type answers omitzero: encoding/json calls the type's IsZero method where it
// has one (and guards against nil), else takes the zero value.
type zeroer uint8

const (
	zeroValue zeroer = iota
	zeroInterface
	zeroPointer
	zeroMethod
	zeroAddrMethod
)

func zeroerOf(t reflect.Type) zeroer {
	switch {
	case t.Kind() == reflect.Interface && t.Implements(isZeroerType):
		return zeroInterface
	case t.Kind() == reflect.Pointer && t.Implements(isZeroerType):
		return zeroPointer
	case t.Implements(isZeroerType):
		return zeroMethod
	case reflect.PointerTo(t).Implements(isZeroerType):
		return zeroAddrMethod
	}
	return zeroValue
}

// isZero is encoding/json's omitzero test.
func isZero(v reflect.Value, z zeroer) bool {
	type isZeroer interface{ IsZero() bool }
	switch z {
	case zeroInterface:
		return v.IsNil() || v.Elem().Kind() == reflect.Pointer && v.Elem().IsNil() || v.Interface().(isZeroer).IsZero()
	case zeroPointer:
		return v.IsNil() || v.Interface().(isZeroer).IsZero()
	case zeroMethod:
		return v.Interface().(isZeroer).IsZero()
	case zeroAddrMethod:
		if !v.CanAddr() {
			v2 := reflect.New(v.Type()).Elem()
			v2.Set(v)
			v = v2
		}
		return v.Addr().Interface().(isZeroer).IsZero()
	}
	return v.IsZero()
}

type structField struct {
	name                string
	index               []int
	omitEmpty, omitZero bool
	zeroer              zeroer
}

// structFields are the JSON fields of a struct type, in no particular order (the result is a
// map); viaJSON marks a type whose fields this walk leaves to encoding/json.
type structFields struct {
	list    []structField
	viaJSON bool
}

// collectFields lists t's fields as encoding/json's typeFields does, embedded structs flattened
// breadth first, without building encoders for the fields' types. Where encoding/json's
// dominance rules would have to choose between two fields of one name, or a field is
// ",string", or an embedded struct is unexported (its fields are not reachable through
// reflect.Value.Interface), the type is left to encoding/json whole.
func collectFields(t reflect.Type) structFields {
	type level struct {
		typ   reflect.Type
		index []int
	}
	var fs structFields
	seen := map[string]bool{}
	visited := map[reflect.Type]bool{}
	next := []level{{typ: t}}
	for len(next) > 0 {
		current := next
		next = nil
		for _, l := range current {
			if visited[l.typ] {
				return structFields{viaJSON: true} // the same struct embedded twice
			}
			visited[l.typ] = true
			for i := range l.typ.NumField() {
				sf := l.typ.Field(i)
				if sf.Anonymous {
					if !sf.IsExported() {
						return structFields{viaJSON: true}
					}
				} else if !sf.IsExported() {
					continue
				}
				tag := sf.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, opts := parseTag(tag)
				if !isValidTag(name) {
					name = ""
				}
				if opts.has("string") {
					return structFields{viaJSON: true}
				}
				index := append(append([]int(nil), l.index...), i)
				ft := sf.Type
				if ft.Name() == "" && ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if name == "" && sf.Anonymous && ft.Kind() == reflect.Struct {
					next = append(next, level{typ: ft, index: index})
					continue
				}
				if name == "" {
					name = sf.Name
				}
				if seen[name] {
					return structFields{viaJSON: true}
				}
				seen[name] = true
				f := structField{name: name, index: index, omitEmpty: opts.has("omitempty"), omitZero: opts.has("omitzero")}
				if f.omitZero {
					f.zeroer = zeroerOf(sf.Type)
				}
				fs.list = append(fs.list, f)
			}
		}
	}
	return fs
}

type tagOptions string

func parseTag(tag string) (string, tagOptions) {
	name, opts, _ := strings.Cut(tag, ",")
	return name, tagOptions(opts)
}

func (o tagOptions) has(name string) bool {
	for s := string(o); s != ""; {
		var opt string
		opt, s, _ = strings.Cut(s, ",")
		if opt == name {
			return true
		}
	}
	return false
}

// isValidTag is encoding/json's test of a tag name.
func isValidTag(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
			// punctuation other than backslash and quotes is allowed
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}

// JSONSize is the length of json.Marshal(v), counted from v's data (Map) without writing it:
// keys and strings with encoding/json's escapes (HTML characters, controls, U+2028/9
// included), numbers as it formats them. A string that is not valid UTF-8 counts its U+FFFD
// as 3 bytes where encoding/json writes the 6 of \ufffd; a render's strings come from YAML,
// which is UTF-8 throughout.
func JSONSize(v any) (int, error) {
	m, err := Map(v)
	if err != nil {
		return 0, err
	}
	return DataJSONSize(m)
}

// DataJSONSize is JSONSize of data Map made (maps, slices, strings, numbers), for a caller
// that keeps the data.
func DataJSONSize(v any) (int, error) {
	switch t := v.(type) {
	case nil:
		return len("null"), nil
	case bool:
		if t {
			return len("true"), nil
		}
		return len("false"), nil
	case string:
		return quotedLen(t), nil
	case int64:
		var b [20]byte
		return len(strconv.AppendInt(b[:0], t, 10)), nil
	case float64:
		b, err := json.Marshal(t)
		return len(b), err
	case []any:
		n := 2 + max(len(t)-1, 0) // [ ] and the commas
		for _, x := range t {
			l, err := DataJSONSize(x)
			if err != nil {
				return 0, err
			}
			n += l
		}
		return n, nil
	case map[string]any:
		n := 2 + max(len(t)-1, 0) // { } and the commas
		for k, x := range t {
			l, err := DataJSONSize(x)
			if err != nil {
				return 0, err
			}
			n += quotedLen(k) + 1 + l // "key":value
		}
		return n, nil
	}
	return 0, fmt.Errorf("no JSON length for %T", v)
}

// quotedLen is the length of s as encoding/json quotes it (valid UTF-8, as data makes it).
func quotedLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
				n += 2
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				n += 6 // \u00XX
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == '\u2028' || r == '\u2029' || r == utf8.RuneError && size == 1 {
			n += 6
		} else {
			n += size
		}
		i += size
	}
	return n
}
