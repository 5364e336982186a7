package main

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// node is one field of the GPUPolicy as a schema: the single tree both emitters (JSON Schema,
// CRD) and the reference table are written from.
type node struct {
	typ         string // object | array | string | boolean | integer
	format      string // int32 | int64 for sized integers
	description string
	def         json.RawMessage // documented default, from v1alpha1.Default
	enum        []string
	minimum     *int64
	maximum     *int64
	properties  []*property // declaration order; emitters sort where the format needs it
	required    []string
	items       *node
	values      *node  // map value schema (additionalProperties)
	goType      string // "core/v1.Toleration" for types outside this module, else ""
	// scalar names a Kubernetes type written as one scalar, an integer or a string
	// ("quantity", "int or string"); typ is then empty.
	scalar string
	// anyOf is a value of several shapes (MIG devices: "all" or a list of indexes); typ is
	// then "". A CRD's structural schema cannot say this, so it keeps such a value whole.
	anyOf []*node
	// shape names an anyOf value in the reference table.
	shape string
}

// scalarTypes are the Go structs that JSON reads from one scalar (they implement
// json.Unmarshaler): described by what a person writes, not by their Go fields.
var scalarTypes = map[reflect.Type]string{
	reflect.TypeFor[resource.Quantity]():  "quantity",
	reflect.TypeFor[intstr.IntOrString](): "int or string",
}

type property struct {
	name string
	*node
}

var kernelModuleTypes = []string{v1alpha1.KernelModulesAuto, v1alpha1.KernelModulesOpen, v1alpha1.KernelModulesProprietary}

// rule is what Go types cannot say: which fields are required and which strings are enums
// (numeric bounds are v1alpha1.Limits, which validation enforces). Keyed by "<GoType>.<GoField>". The enum values are v1alpha1's constants, so a
// new enum value in the API shows up here at compile time or in the staleness test.
type rule struct {
	required bool
	enum     []string
}

func i64(v int64) *int64 { return &v }

var rules = map[string]rule{
	"GPUPolicy.APIVersion":            {required: true, enum: []string{v1alpha1.APIVersion}},
	"GPUPolicy.Kind":                  {required: true, enum: []string{v1alpha1.Kind}},
	"GPUPolicy.Metadata":              {required: true},
	"GPUPolicy.Spec":                  {required: true},
	"ObjectMeta.Name":                 {required: true},
	"Spec.KubernetesVersion":          {required: true},
	"Spec.GitOps":                     {enum: []string{v1alpha1.GitOpsArgoCD, v1alpha1.GitOpsFlux, v1alpha1.GitOpsNone}},
	"Spec.Discovery":                  {enum: []string{v1alpha1.DiscoveryBuiltin, v1alpha1.DiscoveryNFD, v1alpha1.DiscoveryNone}},
	"Spec.Allocation":                 {enum: []string{v1alpha1.AllocationDevicePlugin, v1alpha1.AllocationDRA}},
	"NodePool.Allocation":             {enum: []string{v1alpha1.AllocationDevicePlugin, v1alpha1.AllocationDRA}},
	"Spec.Driver":                     {required: true},
	"Spec.CUDA":                       {required: true},
	"ContainerRuntime.Name":           {enum: []string{v1alpha1.DefaultRuntimeName}},
	"ContainerRuntime.RestartMode":    {enum: []string{v1alpha1.RestartSystemd, v1alpha1.RestartSignal, v1alpha1.RestartNone}},
	"Driver.Source":                   {enum: []string{v1alpha1.SourcePreinstalled, v1alpha1.SourceContainer}},
	"Driver.Version":                  {required: true},
	"Driver.Enforce":                  {enum: []string{v1alpha1.EnforceExact, v1alpha1.EnforceBranch, v1alpha1.EnforceNone}},
	"Driver.KernelModuleType":         {enum: kernelModuleTypes},
	"NodePoolDriver.KernelModuleType": {enum: kernelModuleTypes},
	"CUDA.Version":                    {required: true},
	"Toolkit.Source":                  {enum: []string{v1alpha1.SourceContainer, v1alpha1.SourcePreinstalled}},
	"DevicePlugin.MIGStrategy":        {enum: []string{config.MIGNone, config.MIGSingle, config.MIGMixed}},
	"DevicePlugin.DeviceListStrategy": {enum: []string{config.DeviceListCDICRI, config.DeviceListEnvVar}},
	"NodePool.Name":                   {required: true},
	"NodePool.NodeSelector":           {required: true},
	"Toleration.Operator":             {enum: []string{"Exists", "Equal"}},
	"Toleration.Effect":               {enum: []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}},
}

// noDefault lists defaults the schema must not pin: spec.images.gpupolicy follows the
// function's own release, so a schema default would be stale after every release.
var noDefault = map[string]bool{"Images.GPUPolicy": true}

const modulePrefix = "github.com/gpupolicy/gpupolicy/"

// builder reflects over the API types. given is a minimal valid policy and defaulted the same
// policy after v1alpha1.Default: a field whose value differs between them has a default.
type builder struct {
	docs *comments
}

func (b *builder) policy() (*node, error) {
	given := minimalPolicy()
	defaulted := minimalPolicy()
	v1alpha1.Default(defaulted)
	n, err := b.build(reflect.TypeOf(*given), reflect.ValueOf(*given), reflect.ValueOf(*defaulted))
	if err != nil {
		return nil, err
	}
	n.description, err = b.docs.typ(reflect.TypeOf(*given).PkgPath(), "GPUPolicy")
	return n, err
}

// minimalPolicy sets only the fields without a default.
func minimalPolicy() *v1alpha1.GPUPolicy {
	p := &v1alpha1.GPUPolicy{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.Kind}
	p.Metadata.Name = "fleet"
	p.Spec.KubernetesVersion = "1.34"
	p.Spec.Driver.Version = "580.95.05"
	p.Spec.CUDA.Version = "12.8"
	return p
}

// build returns the schema of t. given/defaulted are the values at this place in the two
// policies, or invalid values where no default can be read (inside lists, absent pointers).
func (b *builder) build(t reflect.Type, given, defaulted reflect.Value) (*node, error) {
	if t.Kind() == reflect.Pointer {
		return b.build(t.Elem(), deref(given), deref(defaulted))
	}
	if t == reflect.TypeOf(v1alpha1.MIGDevices{}) {
		return &node{shape: `"all" or list of integer`, anyOf: []*node{
			{typ: "string", enum: []string{v1alpha1.MIGDevicesAll}},
			{typ: "array", items: &node{typ: "integer", minimum: i64(0)}},
		}}, nil
	}
	n := &node{}
	if s, ok := scalarTypes[t]; ok {
		n.scalar = s
		return n, b.defaultOf(n, given, defaulted)
	}
	if !strings.HasPrefix(t.PkgPath(), modulePrefix) && t.Name() != "" && t.PkgPath() != "" {
		n.goType = shortPkg(t.PkgPath()) + "." + t.Name()
	}
	switch t.Kind() {
	case reflect.Struct:
		n.typ = "object"
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" || !f.IsExported() || name == "" {
				continue
			}
			p, err := b.build(f.Type, field(given, i), field(defaulted, i))
			if err != nil {
				return nil, err
			}
			if err := b.describe(p, t, f, name); err != nil {
				return nil, err
			}
			key := t.Name() + "." + f.Name
			r := rules[key]
			p.enum = r.enum
			if lim, ok := v1alpha1.Limits[key]; ok {
				p.minimum, p.maximum = i64(lim.Min), i64(lim.Max)
			}
			if r.required {
				n.required = append(n.required, name)
			}
			if noDefault[key] {
				p.def = nil
			}
			n.properties = append(n.properties, &property{name: name, node: p})
		}
		return n, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("%s: only string-keyed maps can be described in JSON", t)
		}
		n.typ = "object"
		v, err := b.build(t.Elem(), reflect.Value{}, reflect.Value{})
		if err != nil {
			return nil, err
		}
		n.values = v
	case reflect.Slice:
		n.typ = "array"
		it, err := b.build(t.Elem(), reflect.Value{}, reflect.Value{})
		if err != nil {
			return nil, err
		}
		n.items = it
	case reflect.String:
		n.typ = "string"
	case reflect.Bool:
		n.typ = "boolean"
	case reflect.Int, reflect.Int64, reflect.Uint64, reflect.Uint:
		n.typ, n.format = "integer", "int64"
		if t.Kind() == reflect.Int {
			n.format = ""
		}
		if t.Kind() == reflect.Uint64 || t.Kind() == reflect.Uint {
			n.minimum = i64(0)
		}
	case reflect.Int32:
		n.typ, n.format = "integer", "int32"
	default:
		return nil, fmt.Errorf("%s: no JSON schema mapping for kind %s", t, t.Kind())
	}
	return n, b.defaultOf(n, given, defaulted)
}

// defaultOf sets n's documented default: a value Default put where the minimal policy had
// none (or a nil pointer).
func (b *builder) defaultOf(n *node, given, defaulted reflect.Value) error {
	if defaulted.IsValid() && (!given.IsValid() || !reflect.DeepEqual(given.Interface(), defaulted.Interface())) {
		raw, err := json.Marshal(defaulted.Interface())
		if err != nil {
			return err
		}
		if string(raw) != "null" { // an absent list stays absent: no default to document
			n.def = raw
		}
	}
	return nil
}

// describe sets p's description from the field's comment, or from its type's comment when the
// field has none (spec.driver documents itself on type Driver).
func (b *builder) describe(p *node, parent reflect.Type, f reflect.StructField, name string) error {
	text, err := b.docs.field(parent.PkgPath(), parent.Name(), f.Name, name)
	if err != nil || text != "" {
		p.description = text
		return err
	}
	ft := f.Type
	for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
		ft = ft.Elem()
	}
	if ft.Name() == "" || ft.PkgPath() == "" {
		return nil
	}
	text, err = b.docs.typ(ft.PkgPath(), ft.Name())
	if rest, ok := strings.CutPrefix(text, ft.Name()+" "); ok {
		text = name + " " + rest
	}
	p.description = text
	return err
}

func deref(v reflect.Value) reflect.Value {
	if v.IsValid() && v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return reflect.Value{}
		}
		return v.Elem()
	}
	return v
}

func field(v reflect.Value, i int) reflect.Value {
	if !v.IsValid() {
		return v
	}
	return v.Field(i)
}

// shortPkg turns k8s.io/api/core/v1 into core/v1, the name Kubernetes documentation uses.
func shortPkg(path string) string {
	if rest, ok := strings.CutPrefix(path, "k8s.io/api/"); ok {
		return rest
	}
	return path
}
