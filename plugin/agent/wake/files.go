package wake

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/gpupolicy/gpupolicy/plugin/agent/hostfs"
)

// Dir is one directory to watch and the entries in it that matter.
type Dir struct {
	// Path is the directory: a host path resolved under the host root (as the host's kernel
	// would after chroot), or a path of this container when Local is set or the root is "".
	Path  string
	Local bool
	// Names are filepath.Match patterns of the entries whose creation, change, removal or
	// rename pokes ("nvidia*"); none: every entry. A file replaced atomically by rename (the
	// toolkit status file) is seen as its name being created.
	Names []string
	// Why is the reason the poke carries.
	Why string
	// To is the Trigger this dir pokes; nil: the one Files is called on. One inotify instance
	// then serves several loops (instances are few: fs.inotify.max_user_instances, 128 by
	// default, per user on the whole node).
	To *Trigger
}

func (d Dir) poke(t *Trigger) {
	if d.To != nil {
		t = d.To
	}
	t.Poke(d.Why)
}

func (d Dir) matches(name string) bool {
	if len(d.Names) == 0 {
		return true
	}
	for _, p := range d.Names {
		if ok, _ := filepath.Match(p, name); ok {
			return true
		}
	}
	return false
}

// Files pokes t on every change inotify reports for the entries of dirs, until ctx ends. A
// directory that does not exist yet (the toolkit stage creates /var/lib/gpupolicy on its
// first install) is watched through its nearest existing ancestor, and the watch moves down,
// with a poke, as the missing parts appear; a watched directory that goes away moves it up
// again. Only starting inotify fails (no inotify instances left): the error says which
// setting to raise, and the caller runs on its interval alone. An overflow, which may have
// eaten an event, pokes every dir.
func (t *Trigger) Files(ctx context.Context, log *slog.Logger, root string, dirs ...Dir) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("inotify: %w (at most fs.inotify.max_user_instances per user on the node: raise it with sysctl)", err)
	}
	fw := &fileWatch{t: t, w: w, log: log, root: root, dirs: dirs, at: make([]string, len(dirs)), watched: map[string]bool{}}
	fw.arm()
	go func() {
		defer w.Close()
		fw.run(ctx)
	}()
	return nil
}

type fileWatch struct {
	t       *Trigger
	w       *fsnotify.Watcher
	log     *slog.Logger
	root    string
	dirs    []Dir
	local   []string // each dir's local path
	at      []string // where each dir is watched now: itself or its nearest existing ancestor
	watched map[string]bool
}

// localPath is d's path in this container, "" when it cannot be resolved (a link loop: the
// stage check reports that; the interval still runs it).
func (fw *fileWatch) localPath(d Dir) string {
	if fw.root == "" || d.Local {
		return filepath.Clean(d.Path)
	}
	p, err := hostfs.Resolve(fw.root, d.Path)
	if err != nil {
		return ""
	}
	return p.Local()
}

// arm (re)places every watch, and again until the watched directories are still the dirs'
// nearest existing ancestors once the watches are in place: a level created between the look
// and the watch (MkdirAll racing the arm) would otherwise hide everything below it.
func (fw *fileWatch) arm() {
	for range 16 {
		if !fw.place() {
			return
		}
	}
}

// place puts the watches on the dirs' nearest existing ancestors; it reports whether any
// moved.
func (fw *fileWatch) place() (moved bool) {
	fw.local = fw.local[:0]
	want := map[string]bool{}
	for i, d := range fw.dirs {
		local := fw.localPath(d)
		fw.local = append(fw.local, local)
		at := ""
		for p := local; p != ""; {
			if st, err := os.Stat(p); err == nil && st.IsDir() {
				at = p
				break
			}
			parent := filepath.Dir(p)
			if parent == p {
				break
			}
			p = parent
		}
		if at != fw.at[i] {
			moved = true
		}
		fw.at[i] = at
		if at != "" {
			want[at] = true
		}
	}
	for p := range fw.watched {
		if !want[p] {
			_ = fw.w.Remove(p)
			delete(fw.watched, p)
		}
	}
	for p := range want {
		if fw.watched[p] {
			continue
		}
		if err := fw.w.Add(p); err != nil {
			fw.log.Info("cannot watch directory; its changes are seen at the next interval", "path", p, "error", err.Error())
			continue
		}
		fw.watched[p] = true
	}
	return moved
}

func (fw *fileWatch) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-fw.w.Events:
			if !ok {
				return
			}
			fw.handle(ev)
		case err, ok := <-fw.w.Errors:
			if !ok {
				return
			}
			fw.log.Info("file watch error; re-checking", "error", err.Error())
			fw.arm()
			for _, d := range fw.dirs {
				d.poke(fw.t)
			}
		}
	}
}

func (fw *fileWatch) handle(ev fsnotify.Event) {
	if ev.Op == fsnotify.Chmod {
		return
	}
	rearm := false
	for i, d := range fw.dirs {
		local, at := fw.local[i], fw.at[i]
		switch {
		case local == "":
		case at == local && filepath.Dir(ev.Name) == local:
			if d.matches(filepath.Base(ev.Name)) {
				d.poke(fw.t)
			}
		case ev.Name == local || strings.HasPrefix(local, ev.Name+string(filepath.Separator)):
			// A part of the way to the dir, or the dir itself, appeared or went away.
			rearm = true
		}
	}
	if !rearm {
		return
	}
	fw.arm()
	// Poke every dir whose way changed: the entries may have been created before the watch
	// reached them.
	for i, d := range fw.dirs {
		if l := fw.local[i]; l != "" && (ev.Name == l || strings.HasPrefix(l, ev.Name+string(filepath.Separator))) {
			d.poke(fw.t)
		}
	}
}

// PollFile pokes t when the bytes of file (a host path under root) change, looking every
// period, until ctx ends. It is for files inotify never reports: procfs files such as the
// driver's /proc/driver/nvidia/version are made by the kernel on each read.
func (t *Trigger) PollFile(ctx context.Context, root, file string, period time.Duration, why string) {
	read := func() []byte {
		b, err := hostfs.ReadFile(root, file)
		if err != nil {
			return nil
		}
		return b
	}
	last := read()
	for sleep(ctx, period) {
		if now := read(); !bytes.Equal(now, last) {
			last = now
			t.Poke(why)
		}
	}
}
