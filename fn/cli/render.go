package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/audit"
	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/render"
	"github.com/gpupolicy/gpupolicy/fn/source"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// AuditFile is the privilege report render writes at the top of the tree.
const AuditFile = "AUDIT.md"

// Render is `gpupolicy-fn render -f POLICY -o DIR`.
func Render(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	policyFile := fs.String("f", "", "the GPUPolicy file to render (required)")
	outDir := fs.String("o", "", "directory to write the rendered tree to (required); it is replaced as a whole, atomically, and only if it is empty or holds nothing but what an earlier render wrote, as its .gpupolicy-render.sha256 lists (POLICY must lie outside it)")
	defaults := render.DefaultFileOptions()
	fluxPath := fs.String("flux-path", "", "gitops: flux only: the output directory's path in the Git repository Flux reads, for the Kustomizations' spec.path relative to the repository root, never above it (default: -o relative to the current directory, which should be the repository root)")
	fluxSource := fs.String("flux-source", defaults.FluxSourceKind+"/"+defaults.FluxSourceName, "gitops: flux only: KIND/NAME of the Flux source the Kustomizations read; KIND is GitRepository, OCIRepository, Bucket or ExternalArtifact")
	fluxNamespace := fs.String("flux-namespace", defaults.FluxNamespace, "gitops: flux only: namespace of the Flux Kustomization objects; not spec.namespace, which the GPU stack prunes")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: gpupolicy-fn render -f POLICY -o DIR [flags]

Decodes, defaults and validates POLICY, renders every object and writes one file per object
into DIR, grouped by stage (00-prereqs, 01-driver, 02-container-toolkit, 03-device-plugin,
04-observability), named <kind>-<name>.yaml. gitops: argocd and none add a root
kustomization.yaml; gitops: flux adds one per stage directory and flux/ with one Flux
Kustomization per stage, chained with dependsOn and wait: true. AUDIT.md at the top is the
privilege report (gpupolicy-fn audit) for the reviewer. Warnings go to stderr; any
error exits 1 and leaves DIR untouched, and so does SIGINT or SIGTERM ("interrupted"): the
new tree replaces DIR in one step at the very end, or not at all. DIR must be new, empty,
or hold only what an earlier render wrote, as its manifest .gpupolicy-render.sha256 lists
(sha256sum -c checks it): any other entry (.git, a note, a file you added to a
kustomization.yaml, POLICY itself) is named and DIR is left alone. On success render prints
the files it added, changed and removed.
If DIR is a symbolic link, the tree goes into the directory it points to and the link stays.
The --flux-* flags are refused for a policy that is not gitops: flux.
POLICY may be at most 1 MiB (see Limits in the GPUPolicy reference).

Flags:
`)
		fs.PrintDefaults()
	}
	if exit, done := parseFlags(fs, args); done {
		return exit
	}
	if *policyFile == "" || *outDir == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "render: -f POLICY and -o DIR are required and no other arguments are taken (see render --help)")
		return 2
	}
	if err := checkInputOutside(*policyFile, *outDir); err != nil {
		fmt.Fprintf(stderr, "render: %v\n", err)
		return 2
	}
	opts, fluxSet, err := fluxOptions(fs, defaults, *outDir, *fluxPath, *fluxSource, *fluxNamespace)
	if err != nil {
		fmt.Fprintf(stderr, "render: %v\n", err)
		return 2
	}

	data, err := readPolicy(ctx, *policyFile)
	if ctx.Err() != nil {
		return interrupted(stderr, *outDir)
	}
	if err != nil {
		fmt.Fprintf(stderr, "render: %v\n", err)
		return 1
	}
	// The tree is built in memory (pure work, nothing written) while a signal is waited
	// for: an interrupted render returns at once and leaves that work to the process's end.
	built := make(chan tree, 1)
	go func() { built <- buildTree(ctx, data, opts, fluxSet) }()
	var t tree
	select {
	case <-ctx.Done():
		return interrupted(stderr, *outDir)
	case t = <-built:
	}
	if ctx.Err() != nil {
		return interrupted(stderr, *outDir)
	}
	fmt.Fprint(stderr, t.res.Text(*policyFile))
	if t.res.HasErrors() {
		fmt.Fprintf(stderr, "render: %s has errors; nothing was written\n", *policyFile)
		return 1
	}
	if t.flagErr != nil {
		fmt.Fprintf(stderr, "render: %v; nothing was written\n", t.flagErr)
		return 2
	}
	if t.err != nil {
		fmt.Fprintf(stderr, "render: %v\n", t.err)
		return 1
	}
	p, objs, files := t.policy, t.objs, t.files
	changes, err := writeTree(ctx, *outDir, files)
	if err != nil {
		if ctx.Err() != nil {
			return interrupted(stderr, *outDir)
		}
		fmt.Fprintf(stderr, "render: writing %s: %v\n", *outDir, err)
		return 1
	}
	fmt.Fprintf(stdout, "rendered GPUPolicy %q (%s) into %s: %d objects, %d files\n",
		p.Metadata.Name, gitopsName(p), *outDir, len(objs), len(files))
	changes.print(stdout)
	return 0
}

// fluxSources are the source kinds a Flux Kustomization's sourceRef takes.
var fluxSources = []string{"GitRepository", "OCIRepository", "Bucket", "ExternalArtifact"}

// fluxOptions reads the --flux-* flags into the tree's options, refusing what Flux could not
// read: a namespace or source name that is no Kubernetes name, a source kind Flux has not, a
// path outside the repository. It also returns the flux flags given explicitly.
func fluxOptions(fs *flag.FlagSet, opts render.FileOptions, outDir, fluxPath, fluxSource, fluxNamespace string) (render.FileOptions, []string, error) {
	var set []string
	fs.Visit(func(f *flag.Flag) {
		if strings.HasPrefix(f.Name, "flux-") {
			set = append(set, "--"+f.Name)
		}
	})
	if errs := validation.IsDNS1123Label(fluxNamespace); len(errs) > 0 {
		return opts, nil, fmt.Errorf("--flux-namespace %q is not a namespace name (%s): use Flux's own namespace, e.g. %s", fluxNamespace, errs[0], opts.FluxNamespace)
	}
	opts.FluxNamespace = fluxNamespace
	kind, name, ok := strings.Cut(fluxSource, "/")
	if !ok || kind == "" || name == "" || strings.Contains(name, "/") {
		return opts, nil, fmt.Errorf("--flux-source %q must be KIND/NAME, e.g. GitRepository/flux-system (the source is in the Kustomizations' namespace, --flux-namespace)", fluxSource)
	}
	if !slices.Contains(fluxSources, kind) {
		return opts, nil, fmt.Errorf("--flux-source %q: %s is not a Flux source kind: use one of %s, e.g. GitRepository/%s", fluxSource, kind, strings.Join(fluxSources, ", "), name)
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return opts, nil, fmt.Errorf("--flux-source %q: %q is not a Kubernetes object name (%s): use the name of the %s, e.g. %s/flux-system", fluxSource, name, errs[0], kind, kind)
	}
	opts.FluxSourceKind, opts.FluxSourceName = kind, name
	opts.FluxPath = fluxPath
	if fluxPath == "" && !filepath.IsAbs(outDir) { // an absolute -o: Files names the missing flag if the policy uses flux
		opts.FluxPath = filepath.ToSlash(outDir)
	}
	return opts, set, nil
}

// checkFluxUse refuses flux flags the policy would ignore (gitops is not flux), a Flux
// namespace that is the policy's own (the prereqs stage owns that Namespace and prunes it with
// the GPU stack, Flux's Kustomizations included) and a path Flux cannot read: spec.path is
// relative to the repository's root. It cleans opts.FluxPath.
func checkFluxUse(p *v1alpha1.GPUPolicy, opts *render.FileOptions, set []string) error {
	if p.Spec.GitOps != v1alpha1.GitOpsFlux {
		if len(set) > 0 {
			return fmt.Errorf("%s apply to gitops: flux only, and the policy has gitops: %s: drop them, or set spec.gitops: flux", strings.Join(set, ", "), p.Spec.GitOps)
		}
		return nil
	}
	if opts.FluxNamespace == p.Spec.Namespace {
		return fmt.Errorf("--flux-namespace %s is spec.namespace, which the prereqs stage owns and prunes with the GPU stack: keep the Kustomizations in Flux's own namespace, e.g. --flux-namespace flux-system", opts.FluxNamespace)
	}
	if opts.FluxPath == "" {
		return nil
	}
	which := "--flux-path"
	if !slices.Contains(set, which) {
		which = "-o"
	}
	clean := path.Clean(opts.FluxPath)
	switch {
	case path.IsAbs(clean):
		return fmt.Errorf("%s %q is absolute: Flux reads spec.path relative to the root of the Git repository; give the tree's path from there with --flux-path, e.g. ./%s", which, opts.FluxPath, strings.TrimPrefix(clean, "/"))
	case clean != "." && !filepath.IsLocal(filepath.FromSlash(clean)):
		return fmt.Errorf("%s %q leaves the Git repository Flux reads (spec.path is relative to its root): give the tree's path from the repository root with --flux-path, e.g. ./clusters/prod/gpu", which, opts.FluxPath)
	}
	opts.FluxPath = clean
	return nil
}

// tree is what render writes, or why it cannot.
type tree struct {
	policy  *v1alpha1.GPUPolicy
	objs    render.Objects
	files   map[string][]byte
	res     validate.Results
	flagErr error // a flag the policy cannot take (checkFluxUse)
	err     error
}

// buildTree decodes, validates and renders the policy into the files of the tree, AUDIT.md
// included. fluxSet are the --flux-* flags given, which the policy must take (checkFluxUse).
func buildTree(ctx context.Context, data []byte, opts render.FileOptions, fluxSet []string) tree {
	p, objs, res := pipeline.LoadContext(ctx, data, validate.Options{})
	t := tree{policy: p, objs: objs, res: res}
	if res.HasErrors() {
		return t
	}
	if t.flagErr = checkFluxUse(p, &opts, fluxSet); t.flagErr != nil {
		return t
	}
	if t.files, t.err = render.Files(p, objs, opts); t.err != nil {
		return t
	}
	// The privilege report travels with the manifests so a reviewer reads it in the same PR.
	u, err := objs.Unstructured()
	if err == nil {
		t.files[AuditFile], err = audit.Markdown(u)
	}
	if err != nil {
		t.err = fmt.Errorf("audit: %w", err)
	}
	return t
}

// interrupted ends a render stopped by a signal; the tree writer has removed what it wrote.
func interrupted(stderr io.Writer, dir string) int {
	fmt.Fprintf(stderr, "render: interrupted; %s was not changed\n", dir)
	return 1
}

// readPolicy reads the policy file, refusing one over v1alpha1.MaxPolicyBytes before reading
// it (a regular file) or after reading one byte more (a pipe). A read that blocks (a FIFO no
// one writes) ends when ctx does.
func readPolicy(ctx context.Context, name string) ([]byte, error) {
	if name == "-" {
		return nil, fmt.Errorf("-f -: %w", source.ErrStdin)
	}
	f, err := openContext(ctx, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
		if err := v1alpha1.CheckSize(name, st.Size(), v1alpha1.MaxPolicyBytes); err != nil {
			return nil, err
		}
	}
	stop := context.AfterFunc(ctx, func() { _ = f.Close() })
	defer stop()
	data, err := io.ReadAll(io.LimitReader(f, v1alpha1.MaxPolicyBytes+1))
	if err != nil {
		return nil, err
	}
	if err := v1alpha1.CheckRead(name, data, v1alpha1.MaxPolicyBytes); err != nil {
		return nil, err
	}
	return data, nil
}

// openContext is os.Open that gives up when ctx ends. Opening a FIFO blocks until a writer
// opens it, and nothing interrupts that open(2), so it runs on its own goroutine; one left
// blocked closes the file if it ever opens (the process is about to exit anyway).
func openContext(ctx context.Context, name string) (*os.File, error) {
	type opened struct {
		f   *os.File
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		f, err := os.Open(name)
		ch <- opened{f, err}
	}()
	select {
	case o := <-ch:
		return o.f, o.err
	case <-ctx.Done():
		go func() {
			if o := <-ch; o.f != nil {
				o.f.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// checkInputOutside refuses a policy file inside the output directory: render replaces that
// directory as a whole, so the policy would be deleted by its own render.
func checkInputOutside(policy, dir string) error {
	p, errP := resolvedAbs(policy)
	d, errD := resolvedAbs(dir)
	if errP != nil || errD != nil {
		return nil // a missing policy is reported when it is read; a missing dir holds nothing
	}
	if rel, err := filepath.Rel(d, p); err == nil && filepath.IsLocal(rel) {
		fix := "render into a directory that does not hold it"
		if sub := filepath.Join(d, "gpu"); !strings.HasPrefix(p, sub+string(filepath.Separator)) {
			fix += ", e.g. -o " + filepath.Join(dir, "gpu")
		}
		return fmt.Errorf("-f %s lies inside -o %s, which render replaces as a whole (the policy would be deleted): %s", policy, dir, fix)
	}
	return nil
}

// resolvedAbs is name made absolute with every symbolic link resolved; a name that does not
// exist yet keeps its last elements as given.
func resolvedAbs(name string) (string, error) {
	abs, err := filepath.Abs(name)
	if err != nil {
		return "", err
	}
	var rest []string
	for {
		if r, err := filepath.EvalSymlinks(abs); err == nil {
			return filepath.Join(append([]string{r}, rest...)...), nil
		}
		parent := filepath.Dir(abs)
		if parent == abs {
			return abs, nil
		}
		rest = append([]string{filepath.Base(abs)}, rest...)
		abs = parent
	}
}

func gitopsName(p *v1alpha1.GPUPolicy) string { return "gitops: " + p.Spec.GitOps }
