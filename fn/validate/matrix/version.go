package matrix

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a dotted numeric version ("580.95.05", "1.7", "1.18.0"), compared numerically per
// component so 12.10 > 12.9 and 535.261 > 535.54.
type Version []int

// ParseVersion parses a dotted numeric version of one to four components. Leading zeros are
// kept out of the comparison (05 == 5) since driver patch levels are written zero-padded.
func ParseVersion(s string) (Version, error) {
	if s == "" {
		return nil, fmt.Errorf("empty version")
	}
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return nil, fmt.Errorf("%q has more than four components", s)
	}
	v := make(Version, len(parts))
	for i, p := range parts {
		if p == "" || len(p) > 9 || strings.TrimLeft(p, "0123456789") != "" {
			return nil, fmt.Errorf("%q: component %d is not a number", s, i+1)
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", s, err)
		}
		v[i] = n
	}
	return v, nil
}

// Compare returns -1, 0 or +1; missing trailing components count as 0.
func (v Version) Compare(o Version) int {
	for i := 0; i < max(len(v), len(o)); i++ {
		a, b := at(v, i), at(o, i)
		if a != b {
			if a < b {
				return -1
			}
			return 1
		}
	}
	return 0
}

// Less reports v < o.
func (v Version) Less(o Version) bool { return v.Compare(o) < 0 }

func at(v Version, i int) int {
	if i < len(v) {
		return v[i]
	}
	return 0
}

// Major is the first component.
func (v Version) Major() int { return at(v, 0) }

// MustParse parses a version known to be valid (matrix data already checked at load).
func MustParse(s string) Version {
	v, err := ParseVersion(s)
	if err != nil {
		panic(err)
	}
	return v
}
