package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/server"
)

// kubeletWatch turns plugin-dir events into registration triggers: kubelet.sock created (the
// kubelet started or restarted, possibly long after this plugin) or one of our own sockets
// removed (a restarting kubelet wipes the dir). A trigger is a request to "make every plugin
// serve and register again"; triggers coalesce, so a burst costs one round.
type kubeletWatch struct {
	dir      string
	watcher  *fsnotify.Watcher
	ours     map[string]bool
	triggers chan struct{}
	log      *slog.Logger
}

func newKubeletWatch(dir string, plugins []*server.Plugin, log *slog.Logger) (*kubeletWatch, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", dir, err)
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		return nil, fmt.Errorf("watch %s: %w", dir, err)
	}
	kw := &kubeletWatch{dir: dir, watcher: w, ours: map[string]bool{}, triggers: make(chan struct{}, 1), log: log}
	for _, p := range plugins {
		kw.ours[filepath.Base(p.Socket())] = true
	}
	// The watch is in place before the first look, so a kubelet.sock created in between is
	// seen by one or the other.
	kw.trigger()
	return kw, nil
}

func (w *kubeletWatch) close() { w.watcher.Close() }

func (w *kubeletWatch) trigger() {
	select {
	case w.triggers <- struct{}{}:
	default:
	}
}

func (w *kubeletWatch) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.watcher.Events:
			if !ok {
				return
			}
			name := filepath.Base(ev.Name)
			switch {
			case name == KubeletSocket && ev.Has(fsnotify.Create):
				w.log.Info("kubelet.sock created; registering", "path", ev.Name)
				w.trigger()
			case w.ours[name] && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)):
				w.log.Info("plugin socket removed; serving it again", "path", ev.Name)
				w.trigger()
			}
		case err, ok := <-w.watcher.Errors:
			if !ok {
				return
			}
			// An overflow may have eaten a create event: look again rather than miss it.
			w.log.Warn("plugin dir watch error; re-checking", "error", err)
			w.trigger()
		}
	}
}

// registerLoop makes every plugin serve and register on each trigger. Registration retries
// with doubling delays, bounded per trigger; when kubelet.sock is absent it waits for the
// next trigger, since the kubelet announces itself by creating the socket. A restarting
// kubelet both wipes our sockets and creates its own, which can cost a second registration;
// the kubelet takes a repeated registration as a reconnect, so none is suppressed: skipping
// one on a wrong guess would leave the node without GPUs.
func (m *Manager) registerLoop(ctx context.Context, triggers <-chan struct{}) {
	sock := filepath.Join(m.opts.PluginDir, KubeletSocket)
	again := false
	for {
		if !again {
			select {
			case <-ctx.Done():
				return
			case <-triggers:
			}
		}
		again = false
		for _, p := range m.plugins {
			if !p.Serving() {
				p.Stop()
				if err := p.Start(); err != nil {
					m.log.Error("restart plugin server", "resource", p.Resource(), "error", err)
				}
			}
		}
		if _, err := os.Stat(sock); errors.Is(err, fs.ErrNotExist) {
			m.log.Info("waiting for the kubelet", "socket", sock)
			continue
		}
		for _, p := range m.plugins {
			if again = m.registerWithRetry(ctx, p, sock, triggers); again {
				break
			}
		}
	}
}

// registerWithRetry registers p, retrying with doubling delays up to RetryAttempts tries. A
// trigger during a wait (the kubelet socket came back, our socket went away) cuts the wait
// short: it returns true and the caller starts the round over with fresh delays, so a
// backoff grown against a dying kubelet never delays registering with its successor.
func (m *Manager) registerWithRetry(ctx context.Context, p *server.Plugin, sock string, triggers <-chan struct{}) bool {
	delay := m.opts.RetryInitial
	for attempt := 1; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := p.Register(rctx, sock)
		cancel()
		if err == nil {
			m.log.Info("registered with the kubelet", "resource", p.Resource(), "attempt", attempt)
			return false
		}
		if attempt >= m.opts.RetryAttempts || ctx.Err() != nil {
			m.log.Error("registration failed; waiting for kubelet.sock to be recreated", "resource", p.Resource(), "attempts", attempt, "error", err)
			return false
		}
		m.log.Warn("registration failed; retrying", "resource", p.Resource(), "attempt", attempt, "retry_in", delay, "error", err)
		select {
		case <-ctx.Done():
			return false
		case <-triggers:
			return true
		case <-time.After(delay):
		}
		delay = min(delay*2, m.opts.RetryMax)
	}
}
