package v1alpha1

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// FieldErrors are decoding problems, each with the field path a user can find in the file.
type FieldErrors field.ErrorList

func (e FieldErrors) Error() string { return field.ErrorList(e).ToAggregate().Error() }

// Decode strictly decodes one GPUPolicy document: unknown fields, wrong types, duplicate keys
// and unquoted numbers where a string belongs (an unquoted 12.10 is the float 12.1 to YAML)
// are errors that name their field path and line. A YAML syntax error is returned as is.
// The result is not defaulted.
func Decode(data []byte) (*GPUPolicy, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the policy file is empty: it must hold one GPUPolicy document")
		}
		return nil, fmt.Errorf("YAML syntax: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil && !isEmptyDocument(&extra) {
		return nil, fmt.Errorf("the policy file holds more than one YAML document (line %d): keep one GPUPolicy per file", extra.Line)
	}
	return DecodeNode(&doc)
}

func isEmptyDocument(n *yaml.Node) bool {
	return n.Kind == yaml.DocumentNode && (len(n.Content) == 0 || n.Content[0].Tag == "!!null")
}

// DecodeNode decodes a parsed node (for example a KRM function's input item) like Decode.
func DecodeNode(n *yaml.Node) (*GPUPolicy, error) {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	p := &GPUPolicy{}
	var errs field.ErrorList
	if n.Kind != yaml.MappingNode {
		return nil, FieldErrors{field.TypeInvalid(field.NewPath("<document>"), kindName(n), "a GPUPolicy must be a YAML mapping with apiVersion, kind, metadata and spec")}
	}
	decodeValue(n, reflect.ValueOf(p).Elem(), nil, nil, &errs)
	if p.APIVersion != APIVersion && !hasError(errs, "apiVersion") {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), p.APIVersion, []string{APIVersion}))
	}
	if p.Kind != Kind && !hasError(errs, "kind") {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), p.Kind, []string{Kind}))
	}
	if len(errs) > 0 {
		return nil, FieldErrors(errs)
	}
	return p, nil
}

func hasError(errs field.ErrorList, path string) bool {
	for _, e := range errs {
		if e.Field == path {
			return true
		}
	}
	return false
}

// decodeValue sets v from n, appending one error per problem and carrying on, so a user sees
// every mistake of a file at once. path is nil at the document root; rng is the field's
// entry in Limits, if any, for a number too large to decode.
func decodeValue(n *yaml.Node, v reflect.Value, path *field.Path, rng *Range, errs *field.ErrorList) {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // an explicit null reads as unset, like an absent field
	}
	fp := pathOrRoot(path)
	switch v.Kind() {
	case reflect.Pointer:
		elem := reflect.New(v.Type().Elem())
		decodeValue(n, elem.Elem(), path, rng, errs)
		v.Set(elem)
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			*errs = append(*errs, typeError(fp, n, "a mapping"))
			return
		}
		fields := jsonFields(v.Type())
		eachPair(n, fp, func(k string) *field.Path { return child(path, k) }, errs, func(key string, keyNode, val *yaml.Node) {
			idx, ok := fields[key]
			if !ok {
				*errs = append(*errs, unknownField(child(path, key), key, keyNode.Line, fields))
				return
			}
			var r *Range
			if lim, ok := Limits[v.Type().Name()+"."+v.Type().Field(idx).Name]; ok {
				r = &lim
			}
			decodeValue(val, v.Field(idx), child(path, key), r, errs)
		})
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			*errs = append(*errs, typeError(fp, n, "a mapping of strings"))
			return
		}
		m := reflect.MakeMap(v.Type())
		eachPair(n, fp, fp.Key, errs, func(key string, _, val *yaml.Node) {
			elem := reflect.New(v.Type().Elem()).Elem()
			decodeValue(val, elem, fp.Key(key), nil, errs)
			m.SetMapIndex(reflect.ValueOf(key), elem)
		})
		v.Set(m)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			*errs = append(*errs, typeError(fp, n, "a list"))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			decodeValue(item, s.Index(i), fp.Index(i), rng, errs)
		}
		v.Set(s)
	case reflect.String:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
			*errs = append(*errs, stringError(fp, n))
			return
		}
		v.SetString(n.Value)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			*errs = append(*errs, typeError(fp, n, "true or false"))
			return
		}
		b, _ := strconv.ParseBool(strings.ToLower(n.Value))
		v.SetBool(b)
	case reflect.Int, reflect.Int32, reflect.Int64:
		i, err := scalarInt(n)
		switch {
		case errors.Is(err, errTooLarge) || err == nil && v.OverflowInt(i):
			*errs = append(*errs, tooLarge(fp, n, rng))
			return
		case err != nil:
			*errs = append(*errs, typeError(fp, n, "a whole number"))
			return
		}
		v.SetInt(i)
	case reflect.Uint64, reflect.Uint32, reflect.Uint:
		i, err := scalarInt(n)
		switch {
		case errors.Is(err, errTooLarge) || err == nil && i >= 0 && v.OverflowUint(uint64(i)):
			*errs = append(*errs, tooLarge(fp, n, rng))
			return
		case err != nil || i < 0:
			*errs = append(*errs, typeError(fp, n, "a whole number ≥ 0"))
			return
		}
		v.SetUint(uint64(i))
	default:
		panic(fmt.Sprintf("v1alpha1: no decoder for %s at %s", v.Type(), fp))
	}
}

func eachPair(n *yaml.Node, fp *field.Path, childPath func(string) *field.Path, errs *field.ErrorList, fn func(key string, keyNode, val *yaml.Node)) {
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			*errs = append(*errs, field.Invalid(fp, kindName(k), fmt.Sprintf("line %d: keys must be plain strings", k.Line)))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			*errs = append(*errs, field.Duplicate(childPath(k.Value), fmt.Sprintf("%s (lines %d and %d): remove one", k.Value, first, k.Line)))
			continue
		}
		seen[k.Value] = k.Line
		fn(k.Value, k, val)
	}
}

// errTooLarge: a whole number that does not fit an int64. YAML resolves such a literal
// (10000000000000000000, 1e12) as a float, which would otherwise read as a wrong type.
var errTooLarge = errors.New("too large")

// wholeFloat is a float literal whose value is a whole number: digits, or digits with an
// exponent and no fraction.
var wholeFloat = regexp.MustCompile(`^[-+]?[0-9][0-9_]*([eE][+]?[0-9]+)?$`)

func scalarInt(n *yaml.Node) (int64, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!float" && wholeFloat.MatchString(n.Value) {
		if f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64); err == nil && math.Abs(f) >= 1<<63 {
			return 0, errTooLarge
		}
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		return 0, errors.New("not an integer")
	}
	var i int64
	if err := n.Decode(&i); err != nil {
		return 0, errTooLarge // a valid integer literal outside int64
	}
	return i, nil
}

// tooLarge reports a whole number that does not fit its field, with the field's range.
func tooLarge(p *field.Path, n *yaml.Node, rng *Range) *field.Error {
	want := "a smaller whole number"
	if rng != nil {
		want = fmt.Sprintf("a whole number from %d to %d", rng.Min, rng.Max)
	}
	return field.Invalid(p, n.Value, fmt.Sprintf("line %d: %s is too large a number: use %s", n.Line, n.Value, want))
}

func child(path *field.Path, name string) *field.Path {
	if path == nil {
		return field.NewPath(name)
	}
	return path.Child(name)
}

func pathOrRoot(path *field.Path) *field.Path {
	if path == nil {
		return field.NewPath("<document>")
	}
	return path
}

// jsonFields maps the JSON names of t's exported fields to their index.
func jsonFields(t reflect.Type) map[string]int {
	out := map[string]int{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = i
	}
	return out
}

func unknownField(p *field.Path, key string, line int, fields map[string]int) *field.Error {
	known := slices.Sorted(maps.Keys(fields))
	hint := ""
	for _, k := range known {
		if strings.EqualFold(k, key) || editDistance(strings.ToLower(k), strings.ToLower(key)) <= 2 {
			hint = fmt.Sprintf(" did you mean %q?", k)
			break
		}
	}
	return field.Forbidden(p, fmt.Sprintf("unknown field %q at line %d;%s known fields here: %s", key, line, hint, strings.Join(known, ", ")))
}

func stringError(p *field.Path, n *yaml.Node) *field.Error {
	if n.Kind == yaml.ScalarNode {
		switch n.Tag {
		case "!!float", "!!int":
			return field.TypeInvalid(p, n.Value, fmt.Sprintf("line %d: must be a string; YAML reads the unquoted %s as a number (12.10 would become 12.1): quote it, \"%s\"", n.Line, n.Value, n.Value))
		case "!!bool":
			return field.TypeInvalid(p, n.Value, fmt.Sprintf("line %d: must be a string; YAML reads the unquoted %s as a boolean: quote it, \"%s\"", n.Line, n.Value, n.Value))
		}
	}
	return typeError(p, n, "a string")
}

func typeError(p *field.Path, n *yaml.Node, want string) *field.Error {
	got := kindName(n)
	if n.Kind == yaml.ScalarNode {
		got = fmt.Sprintf("%s %q", strings.TrimPrefix(n.Tag, "!!"), n.Value)
	}
	return field.TypeInvalid(p, got, fmt.Sprintf("line %d: must be %s", n.Line, want))
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return "a scalar"
	default:
		return "a YAML node"
	}
}

// editDistance is the Levenshtein distance, for "did you mean" hints on short field names.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
