// Package matrix is the version matrix of the GPU stack: which driver a CUDA major needs, how
// long a driver branch is supported, what each containerd minor and toolkit version can do, and
// which Kubernetes minors the rendered output supports. The facts live in matrix.yaml, each with
// its source, so they can be reviewed and updated as data; table.go is that file compiled in
// (generated and kept current by TestTableIsMatrixYAML); this file loads and looks them up.
package matrix

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Matrix is the whole table.
type Matrix struct {
	CUDA           []CUDA           `json:"cuda"`
	DriverBranches []DriverBranch   `json:"driverBranches"`
	Containerd     []Containerd     `json:"containerd"`
	Toolkit        []ToolkitFeature `json:"toolkit"`
	Kubernetes     Kubernetes       `json:"kubernetes"`
}

// CUDA is the minimum driver of one CUDA major.
type CUDA struct {
	Major     int    `json:"major"`
	MinDriver string `json:"minDriver"`
	Source    string `json:"source"`
}

// DriverBranch is the lifecycle of one data center driver branch (R535, R580, ...).
type DriverBranch struct {
	Branch int    `json:"branch"`
	Type   string `json:"type"` // LTSB | PB | NFB
	EOL    string `json:"eol"`  // YYYY-MM, the last month with fixes
	Source string `json:"source"`
}

// Containerd is what one containerd minor supports.
type Containerd struct {
	Minor                    string `json:"minor"`
	ConfigVersion            int    `json:"configVersion"`
	ImportsMergePluginTables bool   `json:"importsMergePluginTables"`
	CDI                      bool   `json:"cdi"`
	Source                   string `json:"source"`
}

// ToolkitFeature is the first nvidia-container-toolkit version with a feature.
type ToolkitFeature struct {
	Feature    string `json:"feature"`
	MinVersion string `json:"minVersion"`
	Source     string `json:"source"`
}

// Kubernetes is the supported range of the rendered output and the features it relies on.
type Kubernetes struct {
	Minimum            string              `json:"minimum"`
	MinimumSource      string              `json:"minimumSource"`
	NewestTested       string              `json:"newestTested"`
	NewestTestedSource string              `json:"newestTestedSource"`
	Features           []KubernetesFeature `json:"features"`
}

// KubernetesFeature is a Kubernetes feature a part of the output needs.
type KubernetesFeature struct {
	Name        string `json:"name"`
	UsedBy      string `json:"usedBy"` // guardrails | cdi-cri | dra
	OnByDefault string `json:"onByDefault"`
	GA          string `json:"ga"`
	Source      string `json:"source"`
}

// Toolkit feature names of matrix.yaml.
const (
	FeatureCDI              = "cdi"
	FeatureConfigV3         = "containerd-config-v3"
	FeatureContainerdDropIn = "containerd-drop-in"
)

// Default is the version matrix of matrix.yaml, compiled in (table.go).
func Default() *Matrix { return &table }

// Load parses a matrix document strictly and checks that every fact is well formed and sourced.
func Load(b []byte) (*Matrix, error) {
	m := &Matrix{}
	if err := yaml.UnmarshalStrict(b, m); err != nil {
		return nil, err
	}
	return m, m.check()
}

func (m *Matrix) check() error {
	var errs []string
	need := func(what, source string, ok bool) {
		if strings.TrimSpace(source) == "" {
			errs = append(errs, what+": no source")
		}
		if !ok {
			errs = append(errs, what+": malformed")
		}
	}
	for _, c := range m.CUDA {
		_, err := ParseVersion(c.MinDriver)
		need(fmt.Sprintf("cuda %d", c.Major), c.Source, err == nil && c.Major > 0)
	}
	for _, b := range m.DriverBranches {
		_, err := time.Parse("2006-01", b.EOL)
		need(fmt.Sprintf("driver branch %d", b.Branch), b.Source, err == nil && b.Branch > 0)
	}
	for i, c := range m.Containerd {
		v, err := ParseVersion(c.Minor)
		ok := err == nil && len(v) == 2 && (c.ConfigVersion == 2 || c.ConfigVersion == 3)
		if i > 0 && ok {
			prev, _ := ParseVersion(m.Containerd[i-1].Minor)
			ok = prev.Compare(v) < 0 // lookups rely on ascending order
		}
		need("containerd "+c.Minor, c.Source, ok)
	}
	for _, f := range m.Toolkit {
		_, err := ParseVersion(f.MinVersion)
		need("toolkit feature "+f.Feature, f.Source, err == nil)
	}
	k := m.Kubernetes
	_, e1 := ParseVersion(k.Minimum)
	_, e2 := ParseVersion(k.NewestTested)
	need("kubernetes minimum", k.MinimumSource, e1 == nil)
	need("kubernetes newestTested", k.NewestTestedSource, e2 == nil)
	for _, f := range k.Features {
		_, e1 := ParseVersion(f.OnByDefault)
		_, e2 := ParseVersion(f.GA)
		need("kubernetes feature "+f.Name, f.Source, e1 == nil && e2 == nil)
	}
	if len(m.CUDA) == 0 || len(m.Containerd) == 0 || len(m.Toolkit) == 0 {
		errs = append(errs, "cuda, containerd and toolkit must not be empty")
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid matrix: %s", strings.Join(errs, "; "))
	}
	return nil
}

// CUDAMajor returns the facts of a CUDA major.
func (m *Matrix) CUDAMajor(major int) (CUDA, bool) {
	for _, c := range m.CUDA {
		if c.Major == major {
			return c, true
		}
	}
	return CUDA{}, false
}

// CUDAMajors lists the known majors, for messages.
func (m *Matrix) CUDAMajors() []string {
	out := make([]string, len(m.CUDA))
	for i, c := range m.CUDA {
		out[i] = strconv.Itoa(c.Major) + ".x"
	}
	return out
}

// Branch returns the lifecycle of a driver branch.
func (m *Matrix) Branch(branch int) (DriverBranch, bool) {
	for _, b := range m.DriverBranches {
		if b.Branch == branch {
			return b, true
		}
	}
	return DriverBranch{}, false
}

// PastEOL reports whether the branch gets no more fixes at now: after the last day of its EOL month.
func (b DriverBranch) PastEOL(now time.Time) bool {
	eol, err := time.Parse("2006-01", b.EOL)
	return err == nil && !now.Before(eol.AddDate(0, 1, 0))
}

// ContainerdMinor returns the facts for a containerd minor: exact is false when minor is newer
// than every entry (the newest entry's facts apply) and ok is false when it is older than the
// oldest supported minor or lies between two entries without one of its own (the table lists
// every released minor, so such a minor does not exist).
func (m *Matrix) ContainerdMinor(minor Version) (c Containerd, exact, ok bool) {
	for i := len(m.Containerd) - 1; i >= 0; i-- {
		v, _ := ParseVersion(m.Containerd[i].Minor)
		switch cmp := minor.Compare(v); {
		case cmp == 0:
			return m.Containerd[i], true, true
		case cmp > 0:
			if i < len(m.Containerd)-1 {
				return Containerd{}, false, false // a gap: not a released minor
			}
			return m.Containerd[i], false, true
		}
	}
	return Containerd{}, false, false
}

// ContainerdMinors lists the known minors, oldest first, for messages.
func (m *Matrix) ContainerdMinors() []string {
	out := make([]string, len(m.Containerd))
	for i, c := range m.Containerd {
		out[i] = c.Minor
	}
	return out
}

// ContainerdFor returns the facts for a containerd minor as the policy writes it ("1.7"), for
// the renderer: config version and whether imports merge plugin tables. Versions newer than
// the table get the newest entry's facts.
func (m *Matrix) ContainerdFor(minor string) (Containerd, error) {
	v, err := ParseVersion(minor)
	if err != nil {
		return Containerd{}, err
	}
	c, _, ok := m.ContainerdMinor(v)
	if !ok {
		return Containerd{}, fmt.Errorf("containerd %s is not a supported minor (known: %s)", minor, strings.Join(m.ContainerdMinors(), ", "))
	}
	return c, nil
}

// Feature returns a toolkit feature by name.
func (m *Matrix) Feature(name string) (ToolkitFeature, bool) {
	for _, f := range m.Toolkit {
		if f.Feature == name {
			return f, true
		}
	}
	return ToolkitFeature{}, false
}

// KubernetesFeatures returns the Kubernetes features a part of the output (usedBy) needs.
func (m *Matrix) KubernetesFeatures(usedBy string) []KubernetesFeature {
	var out []KubernetesFeature
	for _, f := range m.Kubernetes.Features {
		if f.UsedBy == usedBy {
			out = append(out, f)
		}
	}
	return out
}
