package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpupolicy/gpupolicy/fn/render"
)

// renderedMarker is the header of the kustomization files render writes; a directory whose
// kustomization carries it is a tree render may replace.
var renderedMarker = []byte("# Rendered by gpupolicy-fn")

// writeTree replaces dir with exactly files, atomically: everything is written to a sibling
// temporary directory first and then swapped into place, so a reader (git, Argo CD, a person)
// sees the old tree or the new one, never half of either. An existing dir is replaced only if
// render wrote everything in it (it would delete whatever else it holds); the ManifestFile it
// writes beside the files records what that is. It returns the files added, changed and removed. Once ctx is done it stops, removes
// the temporary directory and never swaps: dir keeps the old tree.
func writeTree(ctx context.Context, dir string, files map[string][]byte) (treeChanges, error) {
	dir, err := filepath.Abs(dir) // "." has no parent to put the new tree beside
	if err != nil {
		return treeChanges{}, err
	}
	if dir, err = linkTarget(dir); err != nil {
		return treeChanges{}, err
	}
	if filepath.Dir(dir) == dir {
		return treeChanges{}, fmt.Errorf("%s: render needs a directory of its own, not the file system root", dir)
	}
	old, err := previousTree(dir)
	if err != nil {
		return treeChanges{}, err
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return treeChanges{}, err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".new-")
	if err != nil {
		return treeChanges{}, err
	}
	defer os.RemoveAll(tmp) // after a successful swap it holds the old tree
	withManifest := maps.Clone(files)
	withManifest[ManifestFile] = manifest(files)
	if err := writeFiles(ctx, tmp, withManifest); err != nil {
		return treeChanges{}, err
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp makes it 0700
		return treeChanges{}, err
	}
	if err := ctx.Err(); err != nil { // the last moment to stop: the swap is one step
		return treeChanges{}, err
	}
	if err := swapDir(tmp, dir); err != nil {
		return treeChanges{}, err
	}
	return compareTrees(old, files), nil
}

// linkTarget is where the tree goes when dir is a symbolic link: into the directory it points
// to, and the link stays. A link is how the user named the tree (repo/gpu -> ../fleet/gpu);
// swapping a new directory in place of the link would leave the target's old tree behind,
// silently, and change the repository's layout. The swap at the target's own path is as atomic
// for a reader that goes through the link. A link to nothing, or to a file, is refused.
func linkTarget(dir string) (string, error) {
	st, err := os.Lstat(dir)
	if err != nil || st.Mode()&fs.ModeSymlink == 0 {
		if err == nil && !st.IsDir() {
			return "", fmt.Errorf("%s is a file, not a directory: give -o a directory (new, empty, or one render wrote)", dir)
		}
		return dir, nil
	}
	target, err := filepath.EvalSymlinks(dir)
	if err != nil {
		dest, _ := os.Readlink(dir)
		return "", fmt.Errorf("%s is a symbolic link to %s, which does not resolve (%v): create the directory it points to, or give -o a directory", dir, dest, errors.Unwrap(err))
	}
	if st, err := os.Stat(target); err == nil && !st.IsDir() {
		return "", fmt.Errorf("%s is a symbolic link to the file %s, not a directory: give -o a directory (new, empty, or one render wrote)", dir, target)
	}
	return target, nil
}

// writeFiles writes files under root until ctx is done: the directories first, in name
// order, then the files by several writers at once. Creating a file costs a synchronous trip
// to the file system that a fleet's thousands of files would otherwise pay one after another
// (BENCHMARKS.md, "Fleet render").
func writeFiles(ctx context.Context, root string, files map[string][]byte) error {
	names := slices.Sorted(maps.Keys(files))
	made := map[string]bool{}
	for _, name := range names {
		if dir := filepath.Dir(filepath.Join(root, filepath.FromSlash(name))); !made[dir] {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			made[dir] = true
		}
	}
	const writers = 8
	next := make(chan string)
	errs := make(chan error, writers)
	for range writers {
		go func() {
			var err error
			for name := range next {
				if err == nil {
					err = os.WriteFile(filepath.Join(root, filepath.FromSlash(name)), files[name], 0o644)
				}
			}
			errs <- err
		}()
	}
	var err error
	for _, name := range names {
		if err = ctx.Err(); err != nil {
			break
		}
		next <- name
	}
	close(next)
	for range writers {
		if werr := <-errs; err == nil {
			err = werr
		}
	}
	return err
}

// ManifestFile lists every file render wrote into the tree with its sha256, in the format of
// sha256sum (so `sha256sum -c` run in the tree checks it). The next render replaces exactly
// those files: anything else in the directory is the user's, which render refuses to delete.
const ManifestFile = ".gpupolicy-render.sha256"

// manifest is the ManifestFile of files, in path order.
func manifest(files map[string][]byte) []byte {
	var b bytes.Buffer
	for _, name := range slices.Sorted(maps.Keys(files)) {
		sum := sha256.Sum256(files[name])
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(sum[:]), name)
	}
	return b.Bytes()
}

// previousTree reads what an earlier render wrote into dir (slash path → content), refusing a
// directory that holds anything else: the swap deletes every entry of the old tree, so a file
// of the user's (a policy, notes, .git, a manifest added to a kustomization) must never be in
// it. A tree with a ManifestFile is checked against it; an older tree without one by its
// kustomization files (what they list and render's own label on each object). A new or empty
// dir has no previous tree.
func previousTree(dir string) (map[string][]byte, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(entries) == 0) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	written, err := writtenByRender(dir)
	if err != nil {
		return nil, err
	}
	if len(written) == 0 {
		return nil, fmt.Errorf("%s exists and was not written by gpupolicy-fn render (no %s or kustomization.yaml with its header): render replaces the whole directory, so choose a new or empty one", dir, ManifestFile)
	}
	old := map[string][]byte{}
	var foreign []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		switch {
		case rel == ManifestFile && d.Type().IsRegular():
			return nil
		case d.IsDir() && written[rel+"/"]:
			return nil
		case d.Type().IsRegular() && written[rel]:
			b, err := os.ReadFile(p)
			old[rel] = b
			return err
		}
		if d.IsDir() {
			rel += "/"
		}
		foreign = append(foreign, rel)
		if d.IsDir() {
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(foreign) > 0 {
		const show = 10
		names := foreign
		more := ""
		if len(names) > show {
			names, more = names[:show], fmt.Sprintf(" and %d more", len(foreign)-show)
		}
		return nil, fmt.Errorf("%s holds %s%s, which render did not write (not in its %s): render replaces the whole directory and would delete them; move them out of %s (or render into a new or empty directory)",
			dir, strings.Join(names, ", "), more, ManifestFile, dir)
	}
	return old, nil
}

// writtenByRender is what an earlier render wrote into dir, as slash paths (a directory with a
// trailing "/"), from its ManifestFile, or for a tree rendered before there was one, from its
// kustomization files. It is empty when dir has neither.
func writtenByRender(dir string) (map[string]bool, error) {
	written := map[string]bool{}
	add := func(name string) {
		written[name] = true
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			written[d+"/"] = true
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return legacyEntries(dir), nil
	}
	if err != nil {
		return nil, err
	}
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != sha256.Size*2 || !filepath.IsLocal(filepath.FromSlash(name)) || path.Clean(name) != name {
			return nil, fmt.Errorf("%s line %d is not \"<sha256>  <path inside the tree>\": render writes this file; restore it from git, or render into a new or empty directory", filepath.Join(dir, ManifestFile), i+1)
		}
		add(name)
	}
	return written, nil
}

// legacyEntries reads a tree rendered before ManifestFile: every kustomization.yaml with
// render's header at the top or one level down, the resources it lists that carry render's
// managed-by label (a person's own manifest added to the list does not), their directories and
// AUDIT.md.
func legacyEntries(dir string) map[string]bool {
	written := map[string]bool{}
	subs := []string{"."}
	if entries, err := os.ReadDir(dir); err == nil {
		for _, e := range entries {
			if e.IsDir() {
				subs = append(subs, e.Name())
			}
		}
	}
	for _, sub := range subs {
		b, err := os.ReadFile(filepath.Join(dir, sub, "kustomization.yaml"))
		if err != nil || !bytes.HasPrefix(b, renderedMarker) {
			continue
		}
		add := func(name string, check bool) {
			name = path.Clean(path.Join(sub, name))
			if !filepath.IsLocal(name) {
				return
			}
			if check {
				if body, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name))); err == nil && !bytes.Contains(body, managedByRender) {
					return
				}
			}
			written[name] = true
			for d := path.Dir(name); d != "."; d = path.Dir(d) {
				written[d+"/"] = true
			}
		}
		add("kustomization.yaml", false)
		for _, line := range strings.Split(string(b), "\n") {
			if r, ok := strings.CutPrefix(line, "- "); ok {
				r = strings.TrimSpace(r)
				// A listed directory is a Flux stage's or the flux/ tree: its own
				// kustomization.yaml is read in turn.
				add(r, !strings.HasSuffix(r, "/") && path.Ext(r) == ".yaml")
			}
		}
	}
	if len(written) > 0 {
		written[AuditFile] = true
	}
	return written
}

var managedByRender = []byte("app.kubernetes.io/managed-by: " + render.ManagedBy)

// treeChanges is what a render changes in the tree: files added, changed and removed, in
// path order. The ManifestFile is bookkeeping and never listed.
type treeChanges struct {
	fresh                   bool // there was no tree before
	added, changed, removed []string
}

func compareTrees(old, files map[string][]byte) treeChanges {
	c := treeChanges{fresh: old == nil}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if b, ok := old[name]; !ok {
			c.added = append(c.added, name)
		} else if !bytes.Equal(b, files[name]) {
			c.changed = append(c.changed, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(old)) {
		if _, ok := files[name]; !ok {
			c.removed = append(c.removed, name)
		}
	}
	return c
}

// print writes the counts after the render's summary line, and for a tree that existed each
// file by name (a new tree is every file, which the summary already counts).
func (c treeChanges) print(w io.Writer) {
	switch {
	case c.fresh:
		fmt.Fprintln(w, "new tree: every file added")
		return
	case len(c.added)+len(c.changed)+len(c.removed) == 0:
		fmt.Fprintln(w, "unchanged: the tree already held exactly this render")
		return
	}
	fmt.Fprintf(w, "%d added, %d changed, %d removed:\n", len(c.added), len(c.changed), len(c.removed))
	for _, x := range []struct {
		what  string
		names []string
	}{{"added  ", c.added}, {"changed", c.changed}, {"removed", c.removed}} {
		for _, n := range x.names {
			fmt.Fprintf(w, "  %s %s\n", x.what, n)
		}
	}
}
