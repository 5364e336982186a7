package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/audit"
	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/render"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// AuditFile is the privilege report render writes at the top of the tree.
const AuditFile = "AUDIT.md"

// Render is `gpupolicy-fn render -f POLICY -o DIR`.
func Render(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	policyFile := fs.String("f", "", "the GPUPolicy file to render (required)")
	outDir := fs.String("o", "", "directory to write the rendered tree to (required); it is replaced as a whole, atomically, and only if it is empty or was written by render")
	defaults := render.DefaultFileOptions()
	fluxPath := fs.String("flux-path", "", "gitops: flux only: the output directory's path in the Git repository Flux reads, for the Kustomizations' spec.path (default: -o relative to the current directory, which should be the repository root)")
	fluxSource := fs.String("flux-source", defaults.FluxSourceKind+"/"+defaults.FluxSourceName, "gitops: flux only: KIND/NAME of the Flux source the Kustomizations read")
	fluxNamespace := fs.String("flux-namespace", defaults.FluxNamespace, "gitops: flux only: namespace of the Flux Kustomization objects")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: gpupolicy-fn render -f POLICY -o DIR [flags]

Decodes, defaults and validates POLICY, renders every object and writes one file per object
into DIR, grouped by stage (00-prereqs, 01-driver, 02-container-toolkit, 03-device-plugin,
04-observability), named <kind>-<name>.yaml. gitops: argocd and none add a root
kustomization.yaml; gitops: flux adds one per stage directory and flux/ with one Flux
Kustomization per stage, chained with dependsOn and wait: true. AUDIT.md at the top is the
privilege report (gpupolicy-fn audit) for the reviewer. Warnings go to stderr; any
error exits 1 and leaves DIR untouched.

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
	opts := defaults
	opts.FluxNamespace = *fluxNamespace
	kind, name, ok := strings.Cut(*fluxSource, "/")
	if !ok || kind == "" || name == "" {
		fmt.Fprintf(stderr, "render: --flux-source %q must be KIND/NAME, e.g. GitRepository/flux-system\n", *fluxSource)
		return 2
	}
	opts.FluxSourceKind, opts.FluxSourceName = kind, name
	opts.FluxPath = *fluxPath
	if opts.FluxPath == "" {
		if filepath.IsAbs(*outDir) {
			opts.FluxPath = "" // Files names the missing flag if the policy uses flux
		} else {
			opts.FluxPath = path.Clean(filepath.ToSlash(*outDir))
		}
	}

	data, err := os.ReadFile(*policyFile)
	if err != nil {
		fmt.Fprintf(stderr, "render: %v\n", err)
		return 1
	}
	p, objs, res := pipeline.Load(data, validate.Options{})
	fmt.Fprint(stderr, res.Text(*policyFile))
	if res.HasErrors() {
		fmt.Fprintf(stderr, "render: %s has errors; nothing was written\n", *policyFile)
		return 1
	}
	files, err := render.Files(p, objs, opts)
	if err != nil {
		fmt.Fprintf(stderr, "render: %v\n", err)
		return 1
	}
	// The privilege report travels with the manifests so a reviewer reads it in the same PR.
	u, err := objs.Unstructured()
	if err == nil {
		files[AuditFile], err = audit.Markdown(u)
	}
	if err != nil {
		fmt.Fprintf(stderr, "render: audit: %v\n", err)
		return 1
	}
	if err := writeTree(*outDir, files); err != nil {
		fmt.Fprintf(stderr, "render: writing %s: %v\n", *outDir, err)
		return 1
	}
	fmt.Fprintf(stdout, "rendered GPUPolicy %q (%s) into %s: %d objects, %d files\n",
		p.Metadata.Name, gitopsName(p), *outDir, len(objs), len(files))
	return 0
}

func gitopsName(p *v1alpha1.GPUPolicy) string { return "gitops: " + p.Spec.GitOps }
