package hostfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// MaxLinks is how many symbolic links one resolution follows before it calls the path a loop:
// Linux's own limit (MAXSYMLINKS), so the agent gives up exactly where the host's kernel would.
const MaxLinks = 40

// Errors a resolution reports (wrapped in a *PathError that names the path and the fix).
var (
	// ErrLinkLoop: more than MaxLinks symbolic links, a loop on any real node.
	ErrLinkLoop = errors.New("too many levels of symbolic links")
	// ErrDanglingLink: a symbolic link on the way names something that does not exist.
	ErrDanglingLink = errors.New("dangling symbolic link")
	// ErrNotDir: a file where the path needs a directory.
	ErrNotDir = errors.New("not a directory")
	// ErrIsDir: a directory where a file is read (ReadFile).
	ErrIsDir = errors.New("is a directory")
	// ErrOwnedLink: a symbolic link at the name of a file gpupolicy owns (Owned).
	ErrOwnedLink = errors.New("a symbolic link where gpupolicy keeps its own file")
)

// Path is a host path resolved inside the directory where the host's / is mounted.
type Path struct {
	Root string // where the host's / is mounted here: "/host" in the DaemonSets, "/" on the host
	Host string // the host path asked for: what messages name
	Real string // Host with every symbolic link followed: the file the host's kernel opens

	linked bool
}

// Local is Real under Root: the name this process opens.
func (p Path) Local() string { return filepath.Join(p.Root, p.Real) }

// Linked reports whether a symbolic link was followed on the way to the file.
func (p Path) Linked() bool { return p.linked }

// String names the path for messages: the host path, and where its links lead.
func (p Path) String() string {
	if p.Linked() {
		return p.Host + " (a symbolic link to " + p.Real + ")"
	}
	return p.Host
}

// PathError is a host path that cannot be resolved, with the link at fault.
type PathError struct {
	Root   string // the host root it was resolved in
	Path   string // the host path asked for
	Link   string // host path of the link at fault ("" when none)
	Target string // that link's target as written
	At     string // ErrNotDir: host path of the file where a directory must be
	Err    error  // ErrLinkLoop, ErrDanglingLink, ErrNotDir, or what the file system said
}

func (e *PathError) Error() string {
	under := ""
	if e.Root != "/" {
		under = " under --host-root " + e.Root
	}
	switch {
	case errors.Is(e.Err, ErrLinkLoop):
		return fmt.Sprintf("host path %s%s: more than %d symbolic links (a loop; the last one followed is %s -> %s): point the link at a real file or directory, or replace it with one, and retry",
			e.Path, under, MaxLinks, e.Link, e.Target)
	case errors.Is(e.Err, ErrDanglingLink):
		return fmt.Sprintf("host path %s%s: symbolic link %s -> %s points to nothing on the host: gpupolicy does not create files through a dangling link (its target may be on a file system that is not mounted yet); create the target, or replace the link with the file or directory itself, and retry",
			e.Path, under, e.Link, e.Target)
	case errors.Is(e.Err, ErrOwnedLink):
		return fmt.Sprintf("host path %s%s is a symbolic link to %s: gpupolicy creates this file itself and never writes or removes it through a link (the link could make it overwrite any file on the node); remove the link (rm %s on the node), and retry",
			e.Path, under, e.Target, e.Path)
	case errors.Is(e.Err, ErrNotDir):
		via := ""
		if e.Link != "" {
			via = fmt.Sprintf(" (through symbolic link %s -> %s)", e.Link, e.Target)
		}
		return fmt.Sprintf("host path %s%s%s: %s is a file where a directory must be: move that file away, or point the setting at a path whose directories are directories, and retry",
			e.Path, under, via, e.At)
	case e.Link != "":
		return fmt.Sprintf("host path %s%s (through symbolic link %s -> %s): %v", e.Path, under, e.Link, e.Target, e.Err)
	default:
		return fmt.Sprintf("host path %s%s: %v", e.Path, under, e.Err)
	}
}

func (e *PathError) Unwrap() error { return e.Err }

// part is one path component still to resolve; from indexes the link whose target named it
// (-1: the path asked for).
type part struct {
	name string
	from int
}

type link struct{ at, target string }

// Resolve resolves hostPath inside root the way the host's kernel resolves it after
// chroot(root): every symbolic link on the way is followed, an absolute target starting again
// at root, a relative one at the link's directory, and ".." never climbs above root; the
// links are followed physically (".." after a link leaves the link's target, not its name).
// So a link on the node, such as Flatcar's /etc/containerd/config.toml ->
// /usr/share/containerd/config.toml, leads to the node's file, never to a file of the
// container the agent runs in.
//
// A path whose last components do not exist resolves (Real names where a create puts the
// file; reading it gives fs.ErrNotExist). Three layouts are errors (a *PathError naming the
// path, the link at fault and the fix): more than MaxLinks links (ErrLinkLoop); a file where a
// directory must be (ErrNotDir); and a symbolic link whose target does not exist
// (ErrDanglingLink). The agent creates the files it owns, but never through a dangling link: the
// kernel's open(O_CREAT) would create the target, and a target that is missing usually lies on
// a file system not mounted yet (where the file would be hidden once it is) or is a link left
// behind by a removed package; the person who made the link knows which, so reading and writing
// both refuse until the target exists or the link is replaced.
func Resolve(root, hostPath string) (Path, error) {
	if root == "" {
		root = "/"
	}
	p := Path{Root: root, Host: hostPath}
	if !filepath.IsAbs(hostPath) {
		p.Host = "/" + hostPath
	}
	fail := func(err error, links []link, from int) (Path, error) {
		pe := &PathError{Root: root, Path: p.Host, Err: err}
		if from >= 0 {
			pe.Link, pe.Target = links[from].at, links[from].target
		}
		return p, pe
	}
	var links []link
	todo := split(p.Host, -1)
	real := "/"
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c.name {
		case ".":
			continue
		case "..":
			real = filepath.Dir(real)
			continue
		}
		next := filepath.Join(real, c.name)
		fi, err := os.Lstat(filepath.Join(root, next))
		if errors.Is(err, fs.ErrNotExist) {
			if c.from >= 0 {
				return fail(ErrDanglingLink, links, c.from)
			}
			// Only components of the path asked for are left, none of which exists: names a
			// create makes; "." or ".." in them would need the missing directory.
			for _, r := range todo {
				if r.name == "." || r.name == ".." {
					return fail(fmt.Errorf("%s does not exist: %w", next, fs.ErrNotExist), links, -1)
				}
				next = filepath.Join(next, r.name)
			}
			p.Real = next
			return p, nil
		}
		if err != nil {
			return fail(err, links, c.from)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if len(links) == MaxLinks {
				return fail(ErrLinkLoop, links, len(links)-1)
			}
			target, err := os.Readlink(filepath.Join(root, next))
			if err != nil {
				return fail(err, links, c.from)
			}
			links = append(links, link{at: next, target: target})
			p.linked = true
			if filepath.IsAbs(target) {
				real = "/"
			}
			todo = append(split(target, len(links)-1), todo...)
			continue
		}
		if !fi.IsDir() && len(todo) > 0 {
			_, err := fail(fmt.Errorf("%s is not a directory: %w", next, ErrNotDir), links, c.from)
			err.(*PathError).At = next
			return p, err
		}
		real = next
	}
	p.Real = real
	return p, nil
}

// split cuts a path into components; a trailing slash becomes "." so the last component
// must be a directory, as the kernel requires.
func split(path string, from int) []part {
	var out []part
	for _, name := range strings.Split(path, "/") {
		if name != "" {
			out = append(out, part{name, from})
		}
	}
	if strings.HasSuffix(path, "/") && len(out) > 0 {
		out = append(out, part{".", from})
	}
	return out
}
