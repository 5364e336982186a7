package config

import (
	"regexp"
	"sync"
)

// LazyRegexp returns expr compiled on its first use. A package-level regexp.MustCompile runs
// at init in every process that links the package, gpupolicy-fn's KRM call included, though a
// call uses few of them (issue 18: start-up).
func LazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
