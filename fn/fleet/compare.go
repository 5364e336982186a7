package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpupolicy/gpupolicy/fn/diff"
	"github.com/gpupolicy/gpupolicy/fn/render"
	"github.com/gpupolicy/gpupolicy/fn/source"
	"github.com/gpupolicy/gpupolicy/fn/validate"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// Report is what a change moves across a fleet.
type Report struct {
	Old string `json:"old"`
	New string `json:"new"`
	// Summary is the line a pull request comment leads with.
	Summary  string    `json:"summary"`
	Clusters []Cluster `json:"clusters"`
}

// Cluster is one cluster's part of a fleet change.
type Cluster struct {
	Name string `json:"name"`
	// Status is unchanged, changed, added or removed.
	Status string `json:"status"`
	// Summary is fn/diff's summary line of the cluster's change.
	Summary string `json:"summary,omitempty"`
	// Pools are the node pools whose objects change (their device plugin, DRA plugin or driver
	// stage); "(default)" is the unsuffixed stage of the nodes outside every pool (for the
	// driver stage: outside every pool with a driver of its own).
	Pools []string `json:"pools,omitempty"`
	// DaemonSets whose pods restart (rolling) or get a new template (OnDelete) or appear.
	DaemonSets []string `json:"daemonSets,omitempty"`
	// ContainerdRestart: the containerd drop-in's bytes change, so every GPU node of the cluster
	// restarts containerd once as the toolkit stage rolls.
	ContainerdRestart bool `json:"containerdRestart,omitempty"`
	// DriverReload lists the driver stages (pools, "(default)") whose driver container is
	// replaced: those nodes are cordoned, drained and reload the kernel driver, slot by slot.
	DriverReload []string `json:"driverReload,omitempty"`
	// MIGRepartition lists the pools whose MIG layouts change: their GPUs are repartitioned.
	MIGRepartition []string `json:"migRepartition,omitempty"`
	// Findings are fn/diff's: the upgrade window, privileges and RBAC added, the new policy's
	// warnings.
	Findings []diff.Finding `json:"findings,omitempty"`
}

// Status values.
const (
	Unchanged = "unchanged"
	Changed   = "changed"
	Added     = "added"
	Removed   = "removed"
)

// defaultPool names the nodes outside every pool.
const defaultPool = "(default)"

// Compare loads each cluster of both sides and compares them, in cluster order. Clusters are
// compared in parallel, one per CPU; the report does not depend on the order they finish in.
func Compare(old, new *Set) (*Report, error) {
	r := &Report{Old: old.Spec, New: new.Spec}
	names := slices.Sorted(maps.Keys(union(old.Clusters, new.Clusters)))
	r.Clusters = make([]Cluster, len(names))
	errs := make([]error, len(names))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, name := range names {
		o, inOld := old.Clusters[name]
		n, inNew := new.Clusters[name]
		switch {
		case !inOld:
			r.Clusters[i] = Cluster{Name: name, Status: Added}
			continue
		case !inNew:
			r.Clusters[i] = Cluster{Name: name, Status: Removed}
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			r.Clusters[i], errs[i] = compareCluster(name, o, n)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	r.Summary = r.summary()
	return r, nil
}

// union has the keys of both (either may be nil: a cluster without MIG has no layouts).
func union(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	maps.Copy(out, a)
	maps.Copy(out, b)
	return out
}

func compareCluster(name, oldPath, newPath string) (Cluster, error) {
	// Most of a fleet is untouched by a change: the same bytes need no decoding.
	if same, err := sameBytes(oldPath, newPath); err != nil {
		return Cluster{}, fmt.Errorf("cluster %s: %w", name, err)
	} else if same {
		return Cluster{Name: name, Status: Unchanged}, nil
	}
	var in [2]*source.Input
	for i, p := range []string{oldPath, newPath} {
		x, err := source.Load(p, validate.Options{})
		if err != nil {
			return Cluster{}, fmt.Errorf("cluster %s: %w", name, err)
		}
		in[i] = x
	}
	d, err := diff.Compare(in[0], in[1])
	if err != nil {
		return Cluster{}, fmt.Errorf("cluster %s: %w", name, err)
	}
	c := Cluster{Name: name, Status: Unchanged}
	if len(d.Objects.Added)+len(d.Objects.Removed)+len(d.Objects.Changed) == 0 {
		return c, nil
	}
	c.Status, c.Summary, c.Findings = Changed, d.Summary, d.Findings
	pools := map[string]bool{}
	daemonSets := map[string]bool{}
	touch := func(key string) {
		kind, nsName, _ := strings.Cut(key, " ")
		objName := nsName[strings.LastIndex(nsName, "/")+1:]
		if p, ok := poolOf(objName); ok {
			pools[p] = true
		}
		if kind == "DaemonSet" {
			daemonSets[objName] = true
		}
	}
	for _, key := range d.Objects.Added {
		touch(key)
	}
	for _, key := range d.Objects.Removed {
		if p, ok := poolOf(key[strings.LastIndex(key, "/")+1:]); ok {
			pools[p] = true
		}
	}
	heads := byKey(in[1].Objects)
	for _, oc := range d.Objects.Changed {
		if strings.HasPrefix(oc.Object, "DaemonSet ") && oc.Effect == "" {
			continue // a DaemonSet change outside its pod template restarts nothing
		}
		touch(oc.Object)
		if strings.HasPrefix(oc.Object, "DaemonSet ") && runsDriverContainer(heads[oc.Object]) {
			p, ok := poolOf(oc.Object[strings.LastIndex(oc.Object, "/")+1:])
			if !ok {
				p = defaultPool
			}
			c.DriverReload = append(c.DriverReload, p)
		}
	}
	c.ContainerdRestart = d.DropIn != ""
	c.MIGRepartition = migChanges(in[0].Objects, in[1].Objects)
	for _, p := range c.MIGRepartition {
		pools[p] = true
	}
	c.Pools = slices.Sorted(maps.Keys(pools))
	c.DaemonSets = slices.Sorted(maps.Keys(daemonSets))
	slices.Sort(c.DriverReload)
	return c, nil
}

// poolPrefixes name the objects rendered per node pool: "<prefix>-<pool>"; the same name
// without a suffix serves the nodes outside every pool.
var poolPrefixes = []string{config.DaemonSetDevicePlugin, config.DaemonSetDRAPlugin, config.DaemonSetDriver}

// poolOf is the pool an object belongs to by its name, defaultPool for the unsuffixed
// per-pool objects, and false for objects of the whole cluster.
func poolOf(name string) (string, bool) {
	for _, p := range poolPrefixes {
		if name == p {
			return defaultPool, true
		}
		if rest, ok := strings.CutPrefix(name, p+"-"); ok {
			return rest, true
		}
	}
	return "", false
}

func byKey(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		key := o.GetKind() + " " + o.GetName()
		if ns := o.GetNamespace(); ns != "" {
			key = o.GetKind() + " " + ns + "/" + o.GetName()
		}
		out[key] = o
	}
	return out
}

// runsDriverContainer reports whether a driver-stage DaemonSet runs NVIDIA's driver container
// (source: container) rather than the validator of a preinstalled driver.
func runsDriverContainer(ds *unstructured.Unstructured) bool {
	if ds == nil {
		return false
	}
	containers, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		if m, ok := c.(map[string]any); ok && m["name"] == render.DriverContainer {
			return true
		}
	}
	return false
}

// migChanges lists the pools whose layouts (key <pool>.yaml of the MIG ConfigMap) differ.
func migChanges(old, new []*unstructured.Unstructured) []string {
	data := func(objs []*unstructured.Unstructured) map[string]string {
		for _, o := range objs {
			if o.GetKind() == "ConfigMap" && o.GetName() == config.MIGConfigMap {
				m, _, _ := unstructured.NestedStringMap(o.Object, "data")
				return m
			}
		}
		return nil
	}
	a, b := data(old), data(new)
	var out []string
	for _, key := range slices.Sorted(maps.Keys(union(a, b))) {
		if a[key] != b[key] {
			out = append(out, strings.TrimSuffix(key, ".yaml"))
		}
	}
	return out
}

// sameBytes reports whether two cluster entries hold the same bytes: two files, or two trees
// with the same files (by relative path) and contents. Anything else is left to the comparison.
func sameBytes(a, b string) (bool, error) {
	fa, err := files(a)
	if err != nil {
		return false, err
	}
	fb, err := files(b)
	if err != nil {
		return false, err
	}
	return maps.EqualFunc(fa, fb, bytes.Equal), nil
}

// files maps each regular file under path (path itself when it is a file, as "") to its bytes.
func files(path string) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(path, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		out[rel] = b
		return err
	})
	return out, err
}
