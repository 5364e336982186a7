package cli

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/gpupolicy/gpupolicy/fn/overlay"
	"github.com/gpupolicy/gpupolicy/fn/render"
)

// clusterPlaceholder in --flux-path stands for each cluster's name.
const clusterPlaceholder = "{cluster}"

// FleetRender is `gpupolicy-fn fleet render DIR -o OUT`.
func FleetRender(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fleet render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	outDir := fs.String("o", "", "directory to write the fleet to, one render tree per cluster (required); replaced as a whole, atomically, and only if it is new, empty or holds nothing but what an earlier fleet render wrote")
	defaults := render.DefaultFileOptions()
	fluxPath := fs.String("flux-path", "", "gitops: flux clusters only: each tree's path in the repository (or artifact) Flux reads, "+clusterPlaceholder+" standing for the cluster; \".\" for a tree pushed as an artifact of its own (default: -o/"+clusterPlaceholder+" relative to the current directory)")
	fluxSource := fs.String("flux-source", defaults.FluxSourceKind+"/"+defaults.FluxSourceName, "gitops: flux clusters only: KIND/NAME of the Flux source the Kustomizations read")
	fluxNamespace := fs.String("flux-namespace", defaults.FluxNamespace, "gitops: flux clusters only: namespace of the Flux Kustomization objects")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: gpupolicy-fn fleet render DIR -o OUT [flags]

Renders every cluster of a fleet in one process. Each directory under DIR is a cluster: a
kustomization whose build is the cluster's GPUPolicy (the base with the cluster's patches, as
in examples/fleet/clusters; a generators: entry naming the policy overlay is read like a
resource). The overlays are read as kustomize reads them (resources, generators and the
patches, patchesStrategicMerge and patchesJson6902 fields; a kustomization field that would
change the policy in another way is refused), the files every cluster shares are parsed once,
and the clusters render in parallel. OUT/<cluster>/ is that cluster's render tree, the same
bytes as gpupolicy-fn render -f <the cluster's policy> -o OUT/<cluster> writes (see render
--help). Any cluster with an error is reported with the others and nothing is written; OUT is
replaced in one step at the end. gpupolicy-fn fleet diff reads OUT.

Flags:
`)
		fs.PrintDefaults()
	}
	operands, exit, done := parseInterleaved(fs, args)
	if done {
		return exit
	}
	if len(operands) != 1 || *outDir == "" {
		fmt.Fprintln(stderr, "fleet render: DIR and -o OUT are required and no other arguments are taken (see fleet render --help)")
		return 2
	}
	dir := operands[0]
	if err := checkFleetDirs(dir, *outDir); err != nil {
		fmt.Fprintf(stderr, "fleet render: %v\n", err)
		return 2
	}
	if *fluxPath == "" && !filepath.IsAbs(*outDir) {
		*fluxPath = filepath.ToSlash(filepath.Join(*outDir, clusterPlaceholder))
	}
	opts, fluxSet, err := fluxOptions(fs, defaults, *outDir, *fluxPath, *fluxSource, *fluxNamespace)
	if err != nil {
		fmt.Fprintf(stderr, "fleet render: %v\n", err)
		return 2
	}
	clusters, err := fleetClusters(dir)
	if err != nil {
		fmt.Fprintf(stderr, "fleet render: %v\n", err)
		return 1
	}
	trees := renderFleet(ctx, dir, clusters, opts, fluxSet)
	if ctx.Err() != nil {
		return interrupted(stderr, *outDir)
	}
	files := map[string][]byte{}
	failed, objects := 0, 0
	for i, c := range clusters {
		t := trees[i]
		fmt.Fprint(stderr, t.res.Text("cluster "+c))
		switch {
		case t.overlayErr != nil:
			fmt.Fprintf(stderr, "cluster %s: %v\n", c, t.overlayErr)
		case t.flagErr != nil:
			fmt.Fprintf(stderr, "cluster %s: %v\n", c, t.flagErr)
		case t.err != nil:
			fmt.Fprintf(stderr, "cluster %s: %v\n", c, t.err)
		case !t.res.HasErrors():
			for name, b := range t.files {
				files[c+"/"+name] = b
			}
			files[c+"/"+ManifestFile] = manifest(t.files)
			objects += len(t.objs)
			continue
		}
		failed++
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "fleet render: %d of %d clusters have errors; nothing was written\n", failed, len(clusters))
		return 1
	}
	changes, err := writeTree(ctx, *outDir, files)
	if err != nil {
		if ctx.Err() != nil {
			return interrupted(stderr, *outDir)
		}
		fmt.Fprintf(stderr, "fleet render: writing %s: %v\n", *outDir, err)
		return 1
	}
	fmt.Fprintf(stdout, "rendered %d clusters (%s) into %s: %d objects, %d files\n",
		len(clusters), strings.Join(clusters, ", "), *outDir, objects, len(files))
	changes.print(stdout)
	return 0
}

// fleetTree is one cluster's tree, or why its overlay could not be built.
type fleetTree struct {
	tree
	overlayErr error
}

// renderFleet builds every cluster's tree on all CPUs. The overlay cache parses each shared
// file once; clusters whose policy and options come out the same share one render.
func renderFleet(ctx context.Context, dir string, clusters []string, opts render.FileOptions, fluxSet []string) []fleetTree {
	cache := overlay.NewCache()
	var mu sync.Mutex
	rendered := map[[32]byte]func() tree{} // by policy bytes and flux path
	out := make([]fleetTree, len(clusters))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(clusters)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				data, err := overlay.Policy(filepath.Join(dir, clusters[i]), cache)
				if err != nil {
					out[i].overlayErr = err
					continue
				}
				o := opts
				o.FluxPath = strings.ReplaceAll(o.FluxPath, clusterPlaceholder, clusters[i])
				key := sha256.Sum256(append(append([]byte(o.FluxPath), 0), data...))
				mu.Lock()
				once, ok := rendered[key]
				if !ok {
					once = sync.OnceValue(func() tree { return buildTree(ctx, data, o, fluxSet) })
					rendered[key] = once
				}
				mu.Unlock()
				out[i].tree = once()
			}
		}()
	}
	for i := range clusters {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// fleetClusters lists DIR's clusters: every directory under it but hidden ones.
func fleetClusters(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no cluster: give the directory with one kustomization directory per cluster, e.g. examples/fleet/clusters", dir)
	}
	slices.Sort(out)
	return out, nil
}

// checkFleetDirs refuses an OUT inside DIR (the next run would read it as a cluster) and a DIR
// inside OUT (the write would delete the overlays).
func checkFleetDirs(dir, out string) error {
	d, errD := resolvedAbs(dir)
	o, errO := resolvedAbs(out)
	if errD != nil || errO != nil {
		return nil
	}
	if rel, err := filepath.Rel(d, o); err == nil && filepath.IsLocal(rel) {
		return fmt.Errorf("-o %s lies inside %s, where every directory is a cluster: write the fleet beside it, e.g. -o %s", out, dir, filepath.Join(filepath.Dir(filepath.Clean(dir)), "rendered"))
	}
	if rel, err := filepath.Rel(o, d); err == nil && (rel == "." || filepath.IsLocal(rel)) {
		return fmt.Errorf("%s lies inside -o %s, which fleet render replaces as a whole (the overlays would be deleted): write the fleet elsewhere", dir, out)
	}
	return nil
}
