package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpupolicy/gpupolicy/fn/ociartifact"
)

// PasswordEnv holds the registry password for fleet push: never a flag, which ps and shell
// history would show.
const PasswordEnv = "GPUPOLICY_REGISTRY_PASSWORD"

// FleetPush is `gpupolicy-fn fleet push OUT oci://REGISTRY/PATH --tag TAG`.
func FleetPush(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fleet push", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tag := fs.String("tag", "", "the `tag` every cluster's artifact gets (required), e.g. the commit")
	source := fs.String("source", "", "the artifacts' `URL` annotation, org.opencontainers.image.source (default: the git remote origin's URL)")
	revision := fs.String("revision", "", "the artifacts' `revision` annotation in Flux's form BRANCH@sha1:COMMIT (default: the current branch and commit)")
	created := fs.String("created", "", "the artifacts' creation `time`, RFC 3339 (default: $SOURCE_DATE_EPOCH, else now); the same tree and time give the same digest")
	plainHTTP := fs.Bool("plain-http", false, "talk HTTP, not HTTPS, to the registry (a registry on loopback or in a lab)")
	username := fs.String("username", "", "registry `user` for basic or token authentication; the password is read from $"+PasswordEnv)
	only := fs.String("clusters", "", "push only these `clusters`, comma-separated (the canaries first, the rest once they are Ready)")
	format := fs.String("o", "text", "output `format`: text or json")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: gpupolicy-fn fleet push OUT oci://REGISTRY/PATH --tag TAG [flags]

Pushes every cluster's render tree under OUT (what fleet render -o OUT wrote) as an OCI artifact
in Flux's format (the layout flux push artifact writes: Flux's config media type, the tree as
one gzip tarball layer, the source, revision and created annotations) to
REGISTRY/PATH/<cluster>:TAG, for an OCIRepository per cluster. Render trees meant for an
artifact of their own name their Flux paths from the artifact's root: fleet render --flux-path .
--flux-source OCIRepository/NAME. The tarball is reproducible (owners and times cleared), so an
unchanged cluster keeps its layer digest and its blobs are not uploaded again. Every cluster is
pushed even when one fails; the exit code is 1 if any did.
Prints oci://REGISTRY/PATH/<cluster>:TAG@DIGEST per cluster (-o json: a list of objects).

Flags:
`)
		fs.PrintDefaults()
	}
	operands, exit, done := parseInterleaved(fs, args)
	if done {
		return exit
	}
	if len(operands) != 2 || *tag == "" || (*format != "text" && *format != "json") {
		fmt.Fprintln(stderr, "fleet push: OUT, oci://REGISTRY/PATH and --tag are required; -o is text or json (see fleet push --help)")
		return 2
	}
	out, url := operands[0], operands[1]
	repo, ok := strings.CutPrefix(url, "oci://")
	if !ok || repo == "" || strings.Contains(repo, "@") || strings.HasSuffix(repo, "/") {
		fmt.Fprintf(stderr, "fleet push: %q: give the repository prefix as oci://REGISTRY/PATH, without tag or digest (each cluster goes to PATH/<cluster>)\n", url)
		return 2
	}
	if err := ociartifact.CheckTag(*tag); err != nil {
		fmt.Fprintf(stderr, "fleet push: --%v\n", err)
		return 2
	}
	meta, err := artifactMetadata(*source, *revision, *created)
	if err != nil {
		fmt.Fprintf(stderr, "fleet push: %v\n", err)
		return 2
	}
	clusters, err := fleetClusters(out)
	if err != nil {
		fmt.Fprintf(stderr, "fleet push: %v\n", err)
		return 1
	}
	if *only != "" {
		picked := strings.Split(*only, ",")
		for _, c := range picked {
			if !slices.Contains(clusters, c) {
				fmt.Fprintf(stderr, "fleet push: --clusters names %q, which %s does not hold (it has %s)\n", c, out, strings.Join(clusters, ", "))
				return 2
			}
		}
		clusters = slices.DeleteFunc(clusters, func(c string) bool { return !slices.Contains(picked, c) })
	}
	type pushed struct {
		Cluster  string `json:"cluster"`
		URL      string `json:"url"`
		Digest   string `json:"digest,omitempty"`
		Error    string `json:"error,omitempty"`
		Revision string `json:"revision"`
	}
	var results []pushed
	failed := 0
	for _, c := range clusters {
		dir := filepath.Join(out, c)
		r := pushed{Cluster: c, URL: "oci://" + repo + "/" + c + ":" + *tag, Revision: meta.Revision}
		var digest string
		if _, err = os.Stat(filepath.Join(dir, ManifestFile)); err != nil {
			err = fmt.Errorf("%s is not a render tree (no %s): push what gpupolicy-fn fleet render -o %s wrote", dir, ManifestFile, out)
		} else {
			var a *ociartifact.Artifact
			if a, err = ociartifact.Pack(dir, meta); err == nil {
				digest, err = ociartifact.Push(ctx, a, ociartifact.Target{
					Repository: repo + "/" + c, PlainHTTP: *plainHTTP, Username: *username, Password: os.Getenv(PasswordEnv),
				}, *tag)
			}
		}
		if err != nil {
			failed++
			r.Error = err.Error()
			fmt.Fprintf(stderr, "cluster %s: %v\n", c, err)
		} else {
			r.Digest = digest
			if *format == "text" {
				fmt.Fprintf(stdout, "%s@%s\n", r.URL, digest)
			}
		}
		results = append(results, r)
	}
	if *format == "json" {
		b, _ := json.MarshalIndent(results, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "fleet push: %d of %d clusters were not pushed\n", failed, len(clusters))
		return 1
	}
	return 0
}

// artifactMetadata fills what the flags leave out from git (the origin's URL, the branch and
// commit) and the creation time from SOURCE_DATE_EPOCH or the clock.
func artifactMetadata(source, revision, created string) (ociartifact.Metadata, error) {
	m := ociartifact.Metadata{Source: source, Revision: revision}
	git := func(args ...string) string {
		b, err := exec.Command("git", args...).Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	if m.Source == "" {
		if m.Source = git("config", "--get", "remote.origin.url"); m.Source == "" {
			return m, fmt.Errorf("--source is not given and git has no remote origin here: give the repository's URL, e.g. --source https://github.com/ORG/fleet")
		}
	}
	if m.Revision == "" {
		commit, branch := git("rev-parse", "HEAD"), git("branch", "--show-current")
		if commit == "" {
			return m, fmt.Errorf("--revision is not given and this is not a git checkout: give it in Flux's form, e.g. --revision main@sha1:1a2b3c4d")
		}
		if branch == "" {
			branch = "HEAD"
		}
		m.Revision = branch + "@sha1:" + commit
	}
	switch {
	case created != "":
		t, err := time.Parse(time.RFC3339, created)
		if err != nil {
			return m, fmt.Errorf("--created %q is not an RFC 3339 time, e.g. 2026-12-07T10:00:00Z", created)
		}
		m.Created = t
	case os.Getenv("SOURCE_DATE_EPOCH") != "":
		sec, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64)
		if err != nil {
			return m, fmt.Errorf("SOURCE_DATE_EPOCH %q is not a number of seconds", os.Getenv("SOURCE_DATE_EPOCH"))
		}
		m.Created = time.Unix(sec, 0)
	default:
		m.Created = time.Now()
	}
	return m, nil
}
