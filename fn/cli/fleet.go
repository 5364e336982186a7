package cli

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/gpupolicy/gpupolicy/fn/diff"
	"github.com/gpupolicy/gpupolicy/fn/fleet"
)

// fleetUsage lists fleet's subcommands.
const fleetUsage = `Usage:
  gpupolicy-fn fleet render DIR -o OUT   every cluster's overlay rendered, one tree per cluster
  gpupolicy-fn fleet diff OLD NEW        the blast radius of a change across the clusters
  gpupolicy-fn fleet push OUT oci://REGISTRY/PATH --tag TAG
                                         each cluster's tree as an OCI artifact in Flux's format

Run gpupolicy-fn fleet SUBCOMMAND --help for its flags.
`

// Fleet is `gpupolicy-fn fleet SUBCOMMAND`.
func Fleet(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) > 0 && args[0] == "diff":
		return FleetDiff(ctx, args[1:], stdout, stderr)
	case len(args) > 0 && args[0] == "render":
		return FleetRender(ctx, args[1:], stdout, stderr)
	case len(args) > 0 && args[0] == "push":
		return FleetPush(ctx, args[1:], stdout, stderr)
	case len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help"):
		fmt.Fprint(stdout, fleetUsage)
		return 0
	}
	fmt.Fprint(stderr, fleetUsage)
	return 2
}

// FleetDiff is `gpupolicy-fn fleet diff OLD NEW`: exit 0, 1 when an input is invalid or a
// finding reaches --fail-on, 2 on usage errors.
func FleetDiff(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fleet diff", flag.ContinueOnError)
	fs.SetOutput(stderr)
	failOn := fs.String("fail-on", "error", "exit 1 when a cluster's finding has at least this severity: warning, error, or none")
	format := fs.String("o", "md", "output format: md (a pull request comment) or json")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: gpupolicy-fn fleet diff [flags] OLD NEW\n\n"+
			"OLD and NEW are each a fleet: a directory holding one entry per cluster, <cluster>.yaml (a\n"+
			"multi-document file of rendered objects, e.g. `kustomize build` of the cluster) or <cluster>/\n"+
			"(a `gpupolicy-fn render -o` tree), or the same directory at a git revision, REV:DIR\n"+
			"(e.g. main:examples/fleet/rendered; read with `git archive` from the current repository).\n"+
			"Prints the blast radius: which clusters change, are added or removed, and in each the node\n"+
			"pools and DaemonSets that move, whether containerd restarts on its GPU nodes, which driver\n"+
			"containers are replaced, which pools' MIG layouts change, and the cluster's findings (the\n"+
			"upgrade window, privileges and RBAC added; see `gpupolicy-fn diff`).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	operands, exit, done := parseReportFlags(fs, args, failOn, format)
	if done {
		return exit
	}
	var sets [2]*fleet.Set
	for i, spec := range operands {
		s, err := fleet.Load(spec)
		if err != nil {
			fmt.Fprintf(stderr, "fleet diff: %v\n", err)
			return 1
		}
		defer s.Close()
		sets[i] = s
	}
	r, err := fleet.Compare(sets[0], sets[1])
	if err != nil {
		fmt.Fprintf(stderr, "fleet diff: %v\n", err)
		return 1
	}
	out := r.Markdown()
	if *format == "json" {
		out = r.JSON()
	}
	if _, err := stdout.Write(out); err != nil {
		fmt.Fprintf(stderr, "fleet diff: %v\n", err)
		return 1
	}
	if r.Fails(diff.Threshold(*failOn)) {
		fmt.Fprintf(stderr, "fleet diff: findings at or above %s: failing as --fail-on asks\n", *failOn)
		return 1
	}
	return 0
}
