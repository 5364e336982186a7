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
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// FieldErrors are decoding problems, each with the field path a user can find in the file.
type FieldErrors field.ErrorList

func (e FieldErrors) Error() string { return field.ErrorList(e).ToAggregate().Error() }

// Decode strictly decodes one GPUPolicy document: unknown fields, wrong types, duplicate keys
// and unquoted numbers where a string belongs (an unquoted 12.10 is the float 12.1 to YAML)
// are errors that name their field path and line. Input over MaxPolicyBytes, text that is not
// UTF-8 and a YAML syntax error anywhere in the file (in any of its documents) are errors
// too; a file must hold exactly one document that is not empty. YAML merge keys (<<: *base)
// are read as kustomize reads them. The result is not defaulted.
func Decode(data []byte) (*GPUPolicy, error) {
	if err := CheckSize("the policy file", int64(len(data)), MaxPolicyBytes); err != nil {
		return nil, err
	}
	if err := CheckText("the policy file", data); err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var policy *yaml.Node
	for doc := 1; ; doc++ {
		n := &yaml.Node{}
		err := dec.Decode(n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if doc == 1 {
				return nil, fmt.Errorf("YAML syntax: %w", err)
			}
			return nil, fmt.Errorf("YAML syntax in document %d (it starts at line %d): %w", doc, documentStart(data, doc), err)
		}
		switch {
		case isEmptyDocument(n):
		case policy != nil:
			return nil, fmt.Errorf("the policy file holds more than one YAML document (document %d, line %d): keep one GPUPolicy per file", doc, documentStart(data, doc))
		default:
			policy = n
		}
	}
	if policy == nil {
		return nil, errors.New("the policy file is empty: it must hold one GPUPolicy document")
	}
	return DecodeNode(policy)
}

// documentStart is the line where document doc (from 1) of a YAML stream begins: after its
// "---" marker, or line 1 for a first document without one. A marker before any content opens
// the first document; every later one separates two.
func documentStart(data []byte, doc int) int {
	line, seps, content := 1, 0, false
	for rest := data; len(rest) > 0; line++ {
		l, after, _ := bytes.Cut(rest, []byte("\n"))
		rest = after
		t := bytes.TrimRight(l, " \t\r")
		if bytes.Equal(t, []byte("---")) || bytes.HasPrefix(t, []byte("--- ")) {
			if content {
				seps++
			}
			content = true
			if seps == doc-1 {
				if len(t) > 3 {
					return line // "--- {...}": the document starts on the marker's line
				}
				return line + 1
			}
			continue
		}
		if len(t) > 0 && t[0] != '#' && t[0] != '%' {
			content = true
		}
	}
	return 1
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
	if n.Kind != yaml.MappingNode {
		return nil, FieldErrors{field.TypeInvalid(field.NewPath("<document>"), KindName(n), "a GPUPolicy must be a YAML mapping with apiVersion, kind, metadata and spec")}
	}
	d := &decoder{budget: maxDecodedValues, merging: map[*yaml.Node]bool{}}
	d.value(n, reflect.ValueOf(p).Elem(), nil, nil)
	errs := d.errs
	if d.dropped > 0 {
		errs = append(errs, field.Forbidden(field.NewPath("<document>"), fmt.Sprintf("%d more errors not shown: fix the ones above first (is this file a GPUPolicy?)", d.dropped)))
	}
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

// maxDecodedValues bounds the YAML values one decode visits. Aliases and merge keys let a
// small file name the same value many times (a "billion laughs"); the entry limits bound every
// list and map, and this bounds their product. A policy at every limit stays far below it.
const maxDecodedValues = 2_000_000

// decoder carries one decode's errors and what bounds its work.
type decoder struct {
	// errs are the first maxDecodeErrors errors; dropped counts the others.
	errs    field.ErrorList
	dropped int
	// budget is how many more YAML values may be visited; at 0 decoding stops with one error.
	budget int
	// merging holds the mappings whose merge keys are being expanded, so a mapping that
	// merges itself (a: &a {<<: *a}) is an error, not an endless loop.
	merging map[*yaml.Node]bool
}

func (d *decoder) add(e *field.Error) {
	if !d.room() {
		d.dropped++
		return
	}
	d.errs = append(d.errs, e)
}

// room says whether another error is kept; callers skip wording one that would be dropped.
func (d *decoder) room() bool { return len(d.errs) < maxDecodeErrors }

// spend takes one visit from the budget; false once it is spent (reported once).
func (d *decoder) spend(fp *field.Path, n *yaml.Node) bool {
	if d.budget <= 0 {
		return false
	}
	d.budget--
	if d.budget == 0 { // kept past maxDecodeErrors: it says why decoding stopped
		d.errs = append(d.errs, field.Forbidden(fp, fmt.Sprintf("line %d: the policy expands to more than %d YAML values through aliases (*name) and merge keys (<<): write the values out, or alias fewer of them", n.Line, maxDecodedValues)))
		return false
	}
	return true
}

// value sets v from n, appending one error per problem and carrying on, so a user sees
// every mistake of a file at once. path is nil at the document root; rng is the field's
// entry in Limits, if any, for a number too large to decode.
func (d *decoder) value(n *yaml.Node, v reflect.Value, path *field.Path, rng *Range) {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	fp := pathOrRoot(path)
	if !d.spend(fp, n) {
		return
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // an explicit null reads as unset, like an absent field
	}
	if d.scalarType(n, v, fp) {
		return
	}
	if devs, ok := v.Addr().Interface().(*MIGDevices); ok {
		d.migDevices(n, devs, fp)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		elem := reflect.New(v.Type().Elem())
		d.value(n, elem.Elem(), path, rng)
		v.Set(elem)
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			d.add(typeError(fp, n, "a mapping"))
			return
		}
		fields := jsonFields(v.Type())
		for _, kv := range d.pairs(n, fp, func(k string) *field.Path { return child(path, k) }, -1) {
			key := kv.key.Value
			idx, ok := fields[key]
			if !ok && !d.room() {
				d.dropped++
				continue
			}
			if !ok {
				d.add(unknownField(child(path, key), key, kv.key.Line, fields))
				continue
			}
			var r *Range
			if lim, ok := Limits[v.Type().Name()+"."+v.Type().Field(idx).Name]; ok {
				r = &lim
			}
			d.value(kv.val, v.Field(idx), child(path, key), r)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			d.add(typeError(fp, n, "a mapping of strings"))
			return
		}
		limit := entryLimit(fp.String())
		pairs := d.pairs(n, fp, fp.Key, limit.Max)
		if len(pairs) > limit.Max {
			d.add(tooManyError(fp, n, limit))
			return
		}
		m := reflect.MakeMapWithSize(v.Type(), len(pairs))
		for _, kv := range pairs {
			elem := reflect.New(v.Type().Elem()).Elem()
			d.value(kv.val, elem, fp.Key(kv.key.Value), nil)
			m.SetMapIndex(reflect.ValueOf(kv.key.Value).Convert(v.Type().Key()), elem)
		}
		v.Set(m)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.add(typeError(fp, n, "a list"))
			return
		}
		if limit := entryLimit(fp.String()); len(n.Content) > limit.Max {
			d.add(tooManyError(fp, n, limit))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.value(item, s.Index(i), fp.Index(i), rng)
		}
		v.Set(s)
	case reflect.String:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
			d.add(stringError(fp, n))
			return
		}
		v.SetString(n.Value)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			d.add(typeError(fp, n, "true or false"))
			return
		}
		b, _ := strconv.ParseBool(strings.ToLower(n.Value))
		v.SetBool(b)
	case reflect.Int, reflect.Int32, reflect.Int64:
		i, err := scalarInt(n)
		switch {
		case errors.Is(err, errTooLarge) || err == nil && v.OverflowInt(i):
			d.add(tooLarge(fp, n, rng))
			return
		case err != nil:
			d.add(typeError(fp, n, "a whole number"))
			return
		}
		v.SetInt(i)
	case reflect.Uint64, reflect.Uint32, reflect.Uint:
		i, err := scalarInt(n)
		switch {
		case errors.Is(err, errTooLarge) || err == nil && i >= 0 && v.OverflowUint(uint64(i)):
			d.add(tooLarge(fp, n, rng))
			return
		case err != nil || i < 0:
			d.add(typeError(fp, n, "a whole number ≥ 0"))
			return
		}
		v.SetUint(uint64(i))
	default:
		panic(fmt.Sprintf("v1alpha1: no decoder for %s at %s", v.Type(), fp))
	}
}

var (
	quantityType    = reflect.TypeFor[resource.Quantity]()
	intOrStringType = reflect.TypeFor[intstr.IntOrString]()
)

// scalarType decodes the Kubernetes types written as one scalar (a quantity such as 64Mi, an
// int-or-string such as 10% or 2); it reports whether v was one of them.
func (d *decoder) scalarType(n *yaml.Node, v reflect.Value, fp *field.Path) bool {
	switch v.Type() {
	case quantityType:
		if n.Kind != yaml.ScalarNode || (n.Tag != "!!str" && n.Tag != "!!int" && n.Tag != "!!float") {
			d.add(typeError(fp, n, "a quantity such as 64Mi or 20m"))
			return true
		}
		q, err := resource.ParseQuantity(n.Value)
		if err != nil {
			d.add(field.Invalid(fp, n.Value, fmt.Sprintf("line %d: %q is not a quantity: write a number with an optional suffix, e.g. 64Mi (memory) or 20m (cpu)", n.Line, n.Value)))
			return true
		}
		v.Set(reflect.ValueOf(q))
		return true
	case intOrStringType:
		switch {
		case n.Kind == yaml.ScalarNode && n.Tag == "!!int":
			i, err := scalarInt(n)
			if err != nil || i > math.MaxInt32 || i < math.MinInt32 {
				d.add(typeError(fp, n, "a number of nodes or a percentage such as \"10%\""))
				return true
			}
			v.Set(reflect.ValueOf(intstr.FromInt32(int32(i))))
		case n.Kind == yaml.ScalarNode && n.Tag == "!!str":
			v.Set(reflect.ValueOf(intstr.FromString(n.Value)))
		default:
			d.add(typeError(fp, n, "a number of nodes or a percentage such as \"10%\""))
		}
		return true
	}
	return false
}

// tooManyError refuses a list or map over its entry limit, with the count where the file
// itself writes that many (a map that reaches it only through merge keys says "more than").
func tooManyError(fp *field.Path, n *yaml.Node, l EntryLimit) *field.Error {
	count := fmt.Sprintf("%d items", len(n.Content))
	if n.Kind == yaml.MappingNode {
		count = fmt.Sprintf("more than %d entries", l.Max)
		if len(n.Content)/2 > l.Max {
			count = fmt.Sprintf("%d entries", len(n.Content)/2)
		}
	}
	return field.Forbidden(fp, fmt.Sprintf("line %d: has %s, over the limit of %d for %s (see Limits in the GPUPolicy reference): %s", n.Line, count, l.Max, l.Field, l.Fix))
}

// keyValue is one entry of a mapping.
type keyValue struct{ key, val *yaml.Node }

// pairs returns the entries of mapping n with its merge key applied the way kustomize's kyaml
// reads it (yaml.DeAnchor): "<<: *base" or "<<: [*a, *b]" adds the entries of the named
// mappings that n does not set itself, an earlier mapping of the list winning over a later
// one. Keys that are not plain strings and keys written twice in n are errors. Once more than
// stopAfter entries are found (stopAfter ≥ 0) it returns without looking further: the caller
// refuses the mapping anyway.
func (d *decoder) pairs(n *yaml.Node, fp *field.Path, childPath func(string) *field.Path, stopAfter int) []keyValue {
	seen := map[string]int{}
	var own []keyValue
	var merge *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if !d.spend(fp, k) {
			return own
		}
		switch {
		case k.Kind == yaml.ScalarNode && k.Tag == "!!merge":
			if merge != nil {
				d.add(field.Invalid(fp, "<<", fmt.Sprintf("line %d: a second merge key (<<) in one mapping: merge several mappings with one, <<: [*a, *b]", k.Line)))
				continue
			}
			merge = val
			continue
		case k.Kind != yaml.ScalarNode:
			d.add(field.Invalid(fp, KindName(k), fmt.Sprintf("line %d: keys must be plain strings", k.Line)))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.add(field.Duplicate(childPath(k.Value), fmt.Sprintf("%s (lines %d and %d): remove one", k.Value, first, k.Line)))
			continue
		}
		seen[k.Value] = k.Line
		own = append(own, keyValue{k, val})
		if stopAfter >= 0 && len(own) > stopAfter {
			return own
		}
	}
	if merge == nil {
		return own
	}
	if d.merging[n] {
		d.add(field.Invalid(fp, "<<", fmt.Sprintf("line %d: the mapping merges itself (<<): merge another mapping", merge.Line)))
		return own
	}
	d.merging[n] = true
	defer delete(d.merging, n)
	out := own
	for _, m := range d.mergeSources(merge, fp) {
		for _, kv := range d.pairs(m, fp, childPath, stopAfter) {
			if _, ok := seen[kv.key.Value]; ok {
				continue
			}
			seen[kv.key.Value] = kv.key.Line
			out = append(out, kv)
			if stopAfter >= 0 && len(out) > stopAfter {
				return out
			}
		}
	}
	return out
}

// mergeSources are the mappings a merge key's value names, in the order they take effect.
func (d *decoder) mergeSources(v *yaml.Node, fp *field.Path) []*yaml.Node {
	wrong := func(n *yaml.Node) []*yaml.Node {
		d.add(field.Invalid(fp, "<<", fmt.Sprintf("line %d: a merge key (<<) takes a mapping, an alias of one (*base) or a list of aliases ([*a, *b]), not %s", n.Line, KindName(n))))
		return nil
	}
	resolve := func(n *yaml.Node) *yaml.Node {
		for n.Kind == yaml.AliasNode {
			n = n.Alias
		}
		return n
	}
	switch v = resolve(v); v.Kind {
	case yaml.MappingNode:
		return []*yaml.Node{v}
	case yaml.SequenceNode:
		out := make([]*yaml.Node, 0, len(v.Content))
		for _, item := range v.Content {
			if !d.spend(fp, item) {
				return out
			}
			m := resolve(item)
			if m.Kind != yaml.MappingNode {
				return wrong(item)
			}
			out = append(out, m)
		}
		return out
	}
	return wrong(v)
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
	got := KindName(n)
	if n.Kind == yaml.ScalarNode {
		got = fmt.Sprintf("%s %q", strings.TrimPrefix(n.Tag, "!!"), n.Value)
	}
	return field.TypeInvalid(p, got, fmt.Sprintf("line %d: must be %s", n.Line, want))
}

// KindName names the kind of a YAML node for messages: "a mapping", "a list", "a scalar".
func KindName(n *yaml.Node) string {
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
