package v1alpha1

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// Effect says when one field takes effect. A field that is set while the rest of the policy
// rules its condition out does nothing — an upgrade policy for a driver that is never replaced,
// a pool's driver image while the pool's driver stays preinstalled — and validation refuses it
// (fn/validate), naming the field, When and Fix. The field reference (README.md) shows When beside
// the field; both read this table, so the rule and its documentation cannot part. A field
// without a row always takes effect (TestEveryFieldIsClassified keeps the list honest).
type Effect struct {
	// Field is the field's path; [*] stands for any node pool: "spec.nodePools[*].driver.image".
	Field string
	// When completes "takes effect only when ...".
	When string
	// Fix completes "remove <field>, or ...": how to make the field take effect.
	Fix string
	// Live reports whether the field takes effect in the defaulted spec s; pool is the index
	// [*] stands for, -1 for a field outside the pools.
	Live func(s *Spec, pool int) bool
	// Off is the value that asks for nothing (false for a toggle), never refused; nil: none.
	Off any
	// Example is a value to set (YAML) and Context the smallest spec (YAML, merged over a
	// minimal policy) in which it takes effect; each of Dead, merged over Context, rules the
	// condition out. The generated tests (fn/validate) build one policy from each.
	Example string
	Context string
	Dead    []string
}

// Effects is the table, in field order.
var Effects = []Effect{
	{
		Field: "spec.discovery", When: `spec.nodeSelector selects nvidia.com/gpu.present: "true", the one label discovery sets`,
		Fix: `select GPU nodes by nvidia.com/gpu.present: "true", or set discovery: none when another label marks them`,
		Off: DiscoveryNone, Example: DiscoveryNFD,
		Live: func(s *Spec, _ int) bool { return s.NodeSelector[LabelGPUPresent] == "true" },
		Dead: []string{`nodeSelector: {node.example.com/gpu: "yes"}`, `nodeSelector: {nvidia.com/gpu.present: "yes"}`},
	},
	{
		Field: "spec.driver.image", When: "a driver stage that takes its image from spec.driver runs the driver container (driver.source: container, and not every such pool sets its own image)",
		Fix: "set driver.source: container", Example: `"registry.example.com/nvidia/driver"`,
		Context: `driver: {source: container}`,
		Live:    func(s *Spec, _ int) bool { return s.usesDriverImage() },
		Dead: []string{`driver: {source: preinstalled}`, `driver: {source: preinstalled}
nodePools: [{name: a, nodeSelector: {pool: a}, driver: {source: container, image: "registry.example.com/a/driver"}}]`},
	},
	{
		Field: "spec.driver.os", When: "some driver stage runs the driver container (driver.source: container, here or in a pool's driver)",
		Fix: "set driver.source: container", Example: `"ubuntu22.04"`,
		Context: `driver: {source: container}`,
		Live:    func(s *Spec, _ int) bool { return s.UsesDriverSource(SourceContainer) },
		Dead:    []string{`driver: {source: preinstalled}`},
	},
	{
		Field: "spec.driver.onDrift", When: "some driver stage validates a preinstalled driver (driver.source: preinstalled, here or in a pool's driver); a driver container is upgraded, never tainted",
		Fix: "set driver.source: preinstalled where drift should taint", Off: OnDriftReport, Example: OnDriftTaint,
		Live: func(s *Spec, _ int) bool { return s.UsesDriverSource(SourcePreinstalled) },
		Dead: []string{`driver: {source: container}`, `driver: {source: container}
nodePools: [{name: a, nodeSelector: {pool: a}, driver: {source: container}}]`},
	},
	{
		Field: "spec.driver.upgrade", When: "some driver stage runs the driver container (driver.source: container, here or in a pool's driver): a preinstalled driver is replaced with the node image, not by the agents",
		Fix: "set driver.source: container (the policy would then roll driver upgrades)", Example: `{maxUnavailable: 1}`,
		Context: `driver: {source: container}`,
		Live:    func(s *Spec, _ int) bool { return s.UsesDriverSource(SourceContainer) },
		Dead:    []string{`driver: {source: preinstalled}`},
	},
	{
		Field: "spec.driver.upgrade.drain.timeout", When: "driver.upgrade.drain.enabled is true",
		Fix: "set drain.enabled: true", Example: `"20m"`, Context: `driver: {source: container}`,
		Live: func(s *Spec, _ int) bool { return Bool(s.Driver.Upgrade.Drain.Enabled) },
		Dead: []string{`driver: {upgrade: {drain: {enabled: false}}}`},
	},
	{
		Field: "spec.driver.upgrade.drain.podSelector", When: "driver.upgrade.drain.enabled is true",
		Fix: "set drain.enabled: true", Example: `"app=batch"`, Context: `driver: {source: container}`,
		Live: func(s *Spec, _ int) bool { return Bool(s.Driver.Upgrade.Drain.Enabled) },
		Dead: []string{`driver: {upgrade: {drain: {enabled: false}}}`},
	},
	{
		Field: "spec.driver.upgrade.waitForJobs.timeout", When: `driver.upgrade.waitForJobs.podSelector selects pods to wait for (it is not "")`,
		Fix: `set waitForJobs.podSelector, e.g. "app=training"`, Example: `"30m"`,
		Context: `driver: {source: container, upgrade: {waitForJobs: {podSelector: "app=training"}}}`,
		Live:    func(s *Spec, _ int) bool { return s.Driver.Upgrade.WaitForJobs.PodSelector != "" },
		Dead:    []string{`driver: {upgrade: {waitForJobs: {podSelector: ""}}}`},
	},
	{
		Field: "spec.toolkit.image", When: "toolkit.source is container (the image is what the init container copies the toolkit from)",
		Fix: "set toolkit.source: container", Example: `"registry.example.com/nvidia/container-toolkit"`,
		Live: func(s *Spec, _ int) bool { return s.Toolkit.Source == SourceContainer },
		Dead: []string{`toolkit: {source: preinstalled}`},
	},
	devicePluginOnly("resourceName", `"nvidia.com/gpu.shared"`),
	devicePluginOnly("migStrategy", "mixed"),
	devicePluginOnly("deviceListStrategy", "envvar"),
	devicePluginOnly("sharing", `{timeSlicing: {replicas: 4}}`),
	{
		Field: "spec.devicePlugin.healthChecks.ignoredXIDs", When: "devicePlugin.healthChecks.enabled is true",
		Fix: "set healthChecks.enabled: true", Example: `[13, 31]`,
		Live: func(s *Spec, _ int) bool { return Bool(s.DevicePlugin.HealthChecks.Enabled) },
		Dead: []string{`devicePlugin: {healthChecks: {enabled: false}}`},
	},
	poolDevicePluginOnly("resourceName", `"nvidia.com/gpu.shared"`),
	poolDevicePluginOnly("migStrategy", "mixed"),
	poolDevicePluginOnly("deviceListStrategy", "envvar"),
	func() Effect {
		e := poolDevicePluginOnly("sharing", `{timeSlicing: {replicas: 4}}`)
		e.Fix += " (under DRA, pods share a GPU by referencing one ResourceClaim, not by replicas; the claim's GpuConfig chooses time-slicing or MPS)"
		return e
	}(),
	{
		Field: "spec.nodePools[*].devicePlugin.healthChecks.ignoredXIDs", When: "the pool's devicePlugin.healthChecks.enabled (or spec.devicePlugin's, inherited) is true",
		Fix: "set the pool's healthChecks.enabled: true", Example: `[13, 31]`,
		Context: `nodePools: [{name: a, nodeSelector: {pool: a}}]`,
		Live:    func(s *Spec, i int) bool { return Bool(s.NodePools[i].DevicePlugin.HealthChecks.Enabled) },
		Dead: []string{`nodePools: [{devicePlugin: {healthChecks: {enabled: false}}}]`,
			`devicePlugin: {healthChecks: {enabled: false}}`},
	},
	{
		Field: "spec.nodePools[*].driver.image", When: "the pool's driver runs the driver container (the pool's driver.source, or spec.driver.source it inherits, is container)",
		Fix: "set the pool's driver.source: container", Example: `"registry.example.com/a/driver"`,
		Context: `nodePools: [{name: a, nodeSelector: {pool: a}, driver: {source: container}}]`,
		Live:    func(s *Spec, i int) bool { d, _ := s.PoolDriver(&s.NodePools[i]); return d.Source == SourceContainer },
		Dead:    []string{`nodePools: [{driver: {source: preinstalled}}]`},
	},
	featureDiscoveryOnly("resources", `{requests: {cpu: 20m}}`),
	featureDiscoveryOnly("updateStrategy", `{maxUnavailable: 1}`),
	exporterOnly("port", "9500", nil),
	exporterOnly("interval", `"30s"`, nil),
	exporterOnly("serviceMonitor", "true", false),
	{
		Field: "spec.exporter.serviceMonitorLabels", When: "exporter.enabled and exporter.serviceMonitor are true (the labels go on the ServiceMonitor)",
		Fix: "set exporter.serviceMonitor: true (and exporter.enabled: true)", Example: `{release: kube-prometheus-stack}`,
		Live: func(s *Spec, _ int) bool { return Bool(s.Exporter.Enabled) && Bool(s.Exporter.ServiceMonitor) },
		Dead: []string{`exporter: {serviceMonitor: false}`, `exporter: {enabled: false}`},
	},
	exporterOnly("prometheusRule", "true", false),
	{
		Field: "spec.exporter.prometheusRuleLabels", When: "exporter.enabled and exporter.prometheusRule are true (the labels go on the PrometheusRule)",
		Fix: "set exporter.prometheusRule: true (and exporter.enabled: true)", Example: `{release: kube-prometheus-stack}`,
		Live: func(s *Spec, _ int) bool { return Bool(s.Exporter.Enabled) && Bool(s.Exporter.PrometheusRule) },
		Dead: []string{`exporter: {prometheusRule: false}`, `exporter: {serviceMonitor: false}`, `exporter: {enabled: false}`},
	},
	exporterOnly("podAttribution", "true", false),
	exporterOnly("resources", `{requests: {cpu: 100m}}`, nil),
	exporterOnly("updateStrategy", `{maxUnavailable: 1}`, nil),
}

// devicePluginOnly is a spec.devicePlugin field only the device plugin reads: dead when every
// GPU node is handed to the DRA plugin.
func devicePluginOnly(name, example string) Effect {
	return Effect{
		Field: "spec.devicePlugin." + name,
		When:  "some GPU nodes run the device plugin (spec.allocation or a pool's allocation is devicePlugin); the DRA plugin does not read it",
		Fix:   "set allocation: devicePlugin where the setting should apply", Example: example,
		Live: func(s *Spec, _ int) bool {
			if s.Allocation != AllocationDRA {
				return true
			}
			for i := range s.NodePools {
				if s.NodePools[i].Allocation != AllocationDRA {
					return true
				}
			}
			return false
		},
		Dead: []string{`allocation: dra`, `allocation: dra
nodePools: [{name: a, nodeSelector: {pool: a}}]`},
	}
}

// poolDevicePluginOnly is a pool's device plugin field the DRA plugin does not read.
func poolDevicePluginOnly(name, example string) Effect {
	return Effect{
		Field:   "spec.nodePools[*].devicePlugin." + name,
		When:    "the pool's GPUs are allocated by the device plugin (the pool's allocation, or spec.allocation it inherits, is devicePlugin); a node is served by the device plugin or the DRA plugin, never both",
		Fix:     "set the pool's allocation: devicePlugin",
		Example: example, Context: `nodePools: [{name: a, nodeSelector: {pool: a}}]`,
		Live: func(s *Spec, i int) bool { return s.NodePools[i].Allocation != AllocationDRA },
		Dead: []string{`nodePools: [{allocation: dra}]`, `allocation: dra`},
	}
}

func featureDiscoveryOnly(name, example string) Effect {
	return Effect{
		Field: "spec.featureDiscovery." + name, When: "featureDiscovery.enabled is true",
		Fix: "set featureDiscovery.enabled: true", Example: example,
		Live: func(s *Spec, _ int) bool { return Bool(s.FeatureDiscovery.Enabled) },
		Dead: []string{`featureDiscovery: {enabled: false}`},
	}
}

func exporterOnly(name, example string, off any) Effect {
	return Effect{
		Field: "spec.exporter." + name, When: "exporter.enabled is true",
		Fix: "set exporter.enabled: true", Example: example, Off: off,
		Live: func(s *Spec, _ int) bool { return Bool(s.Exporter.Enabled) },
		Dead: []string{`exporter: {enabled: false}`},
	}
}

// LabelGPUPresent is the entry label discovery sets (plugin/config's, repeated here because
// the API package imports no node program).
const LabelGPUPresent = "nvidia.com/gpu.present"

// UsesDriverSource reports whether some driver stage of the defaulted spec uses source: the stage
// of the nodes outside every driver pool, then each driver pool's.
func (s *Spec) UsesDriverSource(source string) bool {
	if s.Driver.Source == source {
		return true
	}
	for _, np := range s.DriverPools() {
		if d, _ := s.PoolDriver(np); d.Source == source {
			return true
		}
	}
	return false
}

// usesDriverImage reports whether some driver container takes spec.driver.image.
func (s *Spec) usesDriverImage() bool {
	if s.Driver.Source == SourceContainer {
		return true
	}
	for _, np := range s.DriverPools() {
		if d, _ := s.PoolDriver(np); d.Source == SourceContainer && np.Driver.Image == "" {
			return true
		}
	}
	return false
}

// SetField is one field a policy sets, found by SetFields.
type SetField struct {
	Path  string // "spec.nodePools[2].driver.image"
	Pool  int    // the index [*] matched, -1 outside the pools
	Value any    // the value as written: a string, number, bool, or nil for an object or list
}

// SetFields lists where p sets the field pattern names ("spec.nodePools[*].driver.image"):
// every match that is present, an explicit zero included (a pointer or a non-nil map set by
// the document). Call it before Default, which fills what the document left out. A pattern
// that names no field matches nothing (TestEffectsNameRealFields keeps the table's valid).
func SetFields(p *GPUPolicy, pattern string) []SetField {
	path, err := stepsOf(pattern)
	if err != nil {
		return nil
	}
	var out []SetField
	walkSet(reflect.ValueOf(p).Elem(), path, nil, path, &out)
	return out
}

// step is one field of a path: its index in the struct, its JSON name, and whether [*] follows.
type step struct {
	index int
	name  string
	list  bool
}

// steps caches each pattern's field indexes: looking struct tags up by name on every
// validation cost more than the rest of a one-pool policy's checks.
var steps sync.Map // pattern → []step

func stepsOf(pattern string) ([]step, error) {
	if s, ok := steps.Load(pattern); ok {
		return s.([]step), nil
	}
	var out []step
	t := reflect.TypeOf(GPUPolicy{})
	for _, part := range strings.Split(pattern, ".") {
		name, list := strings.CutSuffix(part, "[*]")
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return nil, fmt.Errorf("%s: %s is not an object", pattern, part)
		}
		i := jsonField(t, name)
		if i < 0 {
			return nil, fmt.Errorf("%s: no field %q", pattern, name)
		}
		t = t.Field(i).Type
		if list {
			if t.Kind() != reflect.Slice {
				return nil, fmt.Errorf("%s: %s is not a list", pattern, name)
			}
			t = t.Elem()
		}
		out = append(out, step{index: i, name: name, list: list})
	}
	steps.Store(pattern, out)
	return out, nil
}

// jsonField is the index of t's field whose json name is name, -1 when none.
func jsonField(t reflect.Type, name string) int {
	for i := 0; i < t.NumField(); i++ {
		if n, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); n == name {
			return i
		}
	}
	return -1
}

// walkSet descends path from v; idx holds the list indexes taken so far. The path string is
// built only for a field that is present, so a policy that sets nothing costs no allocation.
func walkSet(v reflect.Value, path []step, idx []int, all []step, out *[]SetField) {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return
		}
		v = v.Elem()
	}
	if len(path) == 0 {
		if present(v) {
			pool := -1
			if len(idx) > 0 {
				pool = idx[len(idx)-1]
			}
			*out = append(*out, SetField{Path: pathString(all, idx), Pool: pool, Value: scalar(v)})
		}
		return
	}
	f := v.Field(path[0].index)
	if !path[0].list {
		walkSet(f, path[1:], idx, all, out)
		return
	}
	for i := 0; i < f.Len(); i++ {
		walkSet(f.Index(i), path[1:], append(idx, i), all, out)
	}
}

// pathString writes steps with the list indexes taken: "spec.nodePools[2].driver.image".
func pathString(all []step, idx []int) string {
	var b strings.Builder
	for _, s := range all {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s.name)
		if s.list {
			b.WriteString("[" + strconv.Itoa(idx[0]) + "]")
			idx = idx[1:]
		}
	}
	return b.String()
}

// present: a string, map or slice set by the document is non-empty or non-nil; a struct is
// present when any of its fields is.
func present(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String:
		return v.Len() > 0
	case reflect.Map, reflect.Slice:
		return !v.IsNil()
	case reflect.Struct:
		return !v.IsZero()
	}
	return true // a number or bool reached through a pointer
}

func scalar(v reflect.Value) any {
	switch v.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int64, reflect.Uint64:
		return v.Interface()
	}
	return nil
}

// FieldType is the Go type at a field path of GPUPolicy ([*] steps into a list), for tests
// that check every Effects row names a real field.
func FieldType(pattern string) (reflect.Type, error) {
	path, err := stepsOf(pattern)
	if err != nil {
		return nil, err
	}
	t := reflect.TypeOf(GPUPolicy{})
	for _, s := range path {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		t = t.Field(s.index).Type
		if s.list {
			t = t.Elem()
		}
	}
	return t, nil
}
