package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// renderedMarker is the header of the kustomization files render writes; a directory whose
// kustomization carries it is a tree render may replace.
var renderedMarker = []byte("# Rendered by gpupolicy-fn")

// writeTree replaces dir with exactly files, atomically: everything is written to a sibling
// temporary directory first and then swapped into place, so a reader (git, Argo CD, a person)
// sees the old tree or the new one, never half of either. An existing dir is replaced only if
// render wrote it (it would delete whatever else it holds). Once ctx is done it stops, removes
// the temporary directory and never swaps: dir keeps the old tree.
func writeTree(ctx context.Context, dir string, files map[string][]byte) error {
	dir, err := filepath.Abs(dir) // "." has no parent to put the new tree beside
	if err != nil {
		return err
	}
	if dir, err = linkTarget(dir); err != nil {
		return err
	}
	if filepath.Dir(dir) == dir {
		return fmt.Errorf("%s: render needs a directory of its own, not the file system root", dir)
	}
	if err := checkReplaceable(dir); err != nil {
		return err
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".new-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // after a successful swap it holds the old tree
	if err := writeFiles(ctx, tmp, files); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp makes it 0700
		return err
	}
	if err := ctx.Err(); err != nil { // the last moment to stop: the swap is one step
		return err
	}
	return swapDir(tmp, dir)
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

// writeFiles writes files under root, in name order, each directory made once, until ctx is
// done.
func writeFiles(ctx context.Context, root string, files map[string][]byte) error {
	names := slices.Sorted(maps.Keys(files))
	made := map[string]bool{}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := filepath.Join(root, filepath.FromSlash(name))
		if dir := filepath.Dir(p); !made[dir] {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			made[dir] = true
		}
		if err := os.WriteFile(p, files[name], 0o644); err != nil {
			return err
		}
	}
	return nil
}

// checkReplaceable refuses to replace a directory that render did not write, or one that
// holds anything a render did not write: the swap deletes every entry of the old tree, so a
// file of the user's (a policy, notes, .git) must never be in it.
func checkReplaceable(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(entries) == 0) {
		return nil
	}
	if err != nil {
		return err
	}
	written := renderedEntries(dir)
	if len(written) == 0 {
		return fmt.Errorf("%s exists and was not written by gpupolicy-fn render (no kustomization.yaml with its header): render replaces the whole directory, so choose a new or empty one", dir)
	}
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
		case d.IsDir() && written[rel+"/"]:
			return nil
		case d.Type().IsRegular() && written[rel]:
			return nil
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
		return err
	}
	if len(foreign) > 0 {
		const show = 10
		names := foreign
		more := ""
		if len(names) > show {
			names, more = names[:show], fmt.Sprintf(" and %d more", len(foreign)-show)
		}
		return fmt.Errorf("%s holds %s%s, which render did not write: render replaces the whole directory and would delete them; move them out of %s (or render into a new or empty directory)",
			dir, strings.Join(names, ", "), more, dir)
	}
	return nil
}

// renderedEntries is what an earlier render wrote into dir, as slash paths (a directory with
// a trailing "/"): every kustomization.yaml with render's header at the top or one level down,
// the resources it lists, their directories and AUDIT.md. It is empty when dir holds no such
// kustomization.
func renderedEntries(dir string) map[string]bool {
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
		add := func(name string) {
			name = path.Clean(path.Join(sub, name))
			if !filepath.IsLocal(name) {
				return
			}
			written[name] = true
			for d := path.Dir(name); d != "."; d = path.Dir(d) {
				written[d+"/"] = true
			}
		}
		add("kustomization.yaml")
		for _, line := range strings.Split(string(b), "\n") {
			if r, ok := strings.CutPrefix(line, "- "); ok {
				add(strings.TrimSpace(r))
			}
		}
	}
	if len(written) > 0 {
		written[AuditFile] = true
	}
	return written
}
