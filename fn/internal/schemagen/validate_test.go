package main

import (
	"fmt"
	"maps"
	"slices"
)

// validate checks doc against the subset of JSON Schema the generator emits (type, enum,
// required, properties, additionalProperties, items, minimum, maximum). It exists so the test
// exercises the committed schema itself rather than the generator's view of it.
func validate(s map[string]any, doc any, path string) []string {
	var errs []string
	fail := func(format string, a ...any) { errs = append(errs, path+": "+fmt.Sprintf(format, a...)) }
	switch s["type"] {
	case "object":
		m, ok := doc.(map[string]any)
		if !ok {
			fail("want an object, got %T", doc)
			return errs
		}
		req, _ := s["required"].([]any)
		for _, r := range req {
			if _, ok := m[r.(string)]; !ok {
				fail("missing required %q", r)
			}
		}
		props, _ := s["properties"].(map[string]any)
		keys := slices.Sorted(maps.Keys(m))
		for _, k := range keys {
			if ps, ok := props[k]; ok {
				errs = append(errs, validate(ps.(map[string]any), m[k], path+"."+k)...)
				continue
			}
			switch ap := s["additionalProperties"].(type) {
			case bool:
				if !ap {
					fail("unknown field %q", k)
				}
			case map[string]any:
				errs = append(errs, validate(ap, m[k], path+"."+k)...)
			}
		}
	case "array":
		a, ok := doc.([]any)
		if !ok {
			fail("want an array, got %T", doc)
			return errs
		}
		for i, v := range a {
			errs = append(errs, validate(s["items"].(map[string]any), v, fmt.Sprintf("%s[%d]", path, i))...)
		}
	case "string":
		str, ok := doc.(string)
		if !ok {
			fail("want a string, got %T %v", doc, doc)
			return errs
		}
		if enum, ok := s["enum"].([]any); ok && !slices.Contains(enum, any(str)) {
			fail("%q not in %v", str, enum)
		}
	case "boolean":
		if _, ok := doc.(bool); !ok {
			fail("want a boolean, got %T", doc)
		}
	case "integer":
		f, ok := doc.(float64)
		if !ok || f != float64(int64(f)) {
			fail("want an integer, got %v", doc)
			return errs
		}
		if min, ok := s["minimum"].(float64); ok && f < min {
			fail("%v < minimum %v", f, min)
		}
		if max, ok := s["maximum"].(float64); ok && f > max {
			fail("%v > maximum %v", f, max)
		}
	}
	return errs
}
