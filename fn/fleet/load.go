package fleet

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Set is one side of a fleet comparison: each cluster's rendered output by cluster name.
type Set struct {
	// Spec is what the user named: a directory, or REV:DIR.
	Spec     string
	Clusters map[string]string // cluster → file or directory to load
	cleanup  func()
}

// Close removes what Load extracted from git.
func (s *Set) Close() {
	if s.cleanup != nil {
		s.cleanup()
	}
}

// Names lists the clusters, sorted.
func (s *Set) Names() []string {
	out := make([]string, 0, len(s.Clusters))
	for n := range s.Clusters {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Load reads a fleet: spec is a directory, or REV:DIR (a git revision and a directory in it,
// read with the git of the current directory's repository, e.g. "main:examples/fleet/rendered").
// A directory that exists wins over the git reading of the same string.
func Load(spec string) (*Set, error) {
	if st, err := os.Stat(spec); err == nil {
		if !st.IsDir() {
			return nil, fmt.Errorf("%s is a file: give the directory that holds one <cluster>.yaml or <cluster>/ per cluster", spec)
		}
		return scan(spec, spec)
	}
	rev, dir, ok := strings.Cut(spec, ":")
	if !ok || rev == "" {
		return nil, fmt.Errorf("%s: no such directory (a git revision is written REV:DIR, e.g. main:examples/fleet/rendered)", spec)
	}
	tmp, err := os.MkdirTemp("", "gpupolicy-fleet-")
	if err != nil {
		return nil, err
	}
	if err := extract(rev, dir, tmp); err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("%s: %w", spec, err)
	}
	s, err := scan(spec, filepath.Join(tmp, filepath.FromSlash(path.Clean(dir))))
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	s.cleanup = func() { os.RemoveAll(tmp) }
	return s, nil
}

// scan lists root's clusters: each <name>.yaml file and each directory <name>/.
func scan(spec, root string) (*Set, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", spec, err)
	}
	s := &Set{Spec: spec, Clusters: map[string]string{}}
	for _, e := range entries {
		name, isYAML := strings.CutSuffix(e.Name(), ".yaml")
		switch {
		case strings.HasPrefix(e.Name(), "."):
		case e.IsDir():
			s.Clusters[e.Name()] = filepath.Join(root, e.Name())
		case isYAML:
			if _, dup := s.Clusters[name]; dup {
				return nil, fmt.Errorf("%s: cluster %s is both %s.yaml and %s/: keep one", spec, name, name, name)
			}
			s.Clusters[name] = filepath.Join(root, e.Name())
		}
	}
	if len(s.Clusters) == 0 {
		return nil, fmt.Errorf("%s holds no cluster: give the directory that holds one <cluster>.yaml (rendered objects) or <cluster>/ (a `gpupolicy-fn render -o` tree) per cluster", spec)
	}
	return s, nil
}

// extract writes dir as it is at rev into out, through `git archive` (no checkout is touched).
func extract(rev, dir, out string) error {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("git", "archive", "--format=tar", rev, "--", dir)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if errors.Is(err, exec.ErrNotFound) {
			msg = "git is not installed"
		}
		return fmt.Errorf("git archive %s -- %s: %s", rev, dir, msg)
	}
	tr := tar.NewReader(&stdout)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.FromSlash(path.Clean(h.Name))
		if strings.HasPrefix(name, "..") || filepath.IsAbs(name) {
			return fmt.Errorf("git archive holds %q, outside the directory", h.Name)
		}
		target := filepath.Join(out, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}
