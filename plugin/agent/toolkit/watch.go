package toolkit

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/agent/wake"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// Why the --watch re-check runs before its interval.
const (
	WhyContainerdSocket = "containerd socket created or removed"
	WhyNodeConfig       = "containerd config or drop-in changed on the node"
	WhyRenderedDropIn   = "rendered drop-in changed"
	WhyMIGApplied       = "MIG layout applied (the CDI spec's MIG devices changed)"
)

// watchDirs are the host directories whose changes re-check at once: containerd's socket
// directory (containerd unlinks and re-creates its socket when it starts, so every restart,
// a person's under restart-mode none too, shows as the socket created), and the directories
// of the main config and the drop-in (a person's edit or removal). The rendered drop-in is a
// container path: its ConfigMap volume is updated by a swap of the ..data link.
func (in *Installer) watchDirs() []wake.Dir {
	configPath, dropIn := in.paths()
	socket := in.socket()
	return []wake.Dir{
		{Path: filepath.Dir(socket), Names: []string{filepath.Base(socket)}, Why: WhyContainerdSocket},
		{Path: filepath.Dir(configPath), Names: []string{filepath.Base(configPath)}, Why: WhyNodeConfig},
		{Path: filepath.Dir(dropIn), Names: []string{filepath.Base(dropIn)}, Why: WhyNodeConfig},
		{Path: filepath.Dir(in.DropInSource), Local: true, Names: []string{"..data", filepath.Base(in.DropInSource)}, Why: WhyRenderedDropIn},
		{Path: filepath.Dir(config.MIGAppliedFile), Names: []string{filepath.Base(config.MIGAppliedFile)}, Why: WhyMIGApplied},
	}
}

// Watch installs now, again at once when the node changes (see watchDirs), and every interval
// as a resync, until ctx ends; report gets every pass's outcome (its error is logged by the
// caller and retried at the next event or interval). After containerd's socket is created,
// the pass first waits for its CRI (WaitCRI): a verdict taken while containerd still starts
// would close the gate for a restart that is going fine. Our own writes (the drop-in, the
// status file) cost at most one extra pass, which changes nothing.
func (in *Installer) Watch(ctx context.Context, interval time.Duration, report func(Result, error)) error {
	if interval <= 0 {
		return fmt.Errorf("toolkit: watch interval must be positive, got %s", interval)
	}
	log := in.log()
	t := wake.New()
	if err := t.Files(ctx, log, in.HostRoot, in.watchDirs()...); err != nil {
		log.Warn("node changes are seen only at the interval", "error", err, "interval", interval.String())
	}
	var why []string
	for {
		if slices.Contains(why, WhyContainerdSocket) {
			if err := in.WaitCRI(ctx); err != nil && ctx.Err() == nil {
				log.Info("containerd's CRI did not become ready after its socket changed; checking anyway", "error", err.Error())
			}
		}
		if len(why) > 0 {
			log.Info("re-checking", "because", why)
		}
		report(in.Install(ctx))
		if err := t.Wait(ctx, interval); err != nil {
			return err
		}
		why = t.Take()
	}
}

// WaitCRI waits, up to the restart timeout, until containerd answers on its CRI with
// RuntimeReady; it returns the last reason when the timeout passes or ctx ends.
func (in *Installer) WaitCRI(ctx context.Context) error {
	deadline := time.Now().Add(in.restartTimeout())
	for {
		host, local, err := in.socketPath()
		if err == nil {
			var view criView
			if view, err = queryCRI(ctx, host, local); err == nil {
				if view.RuntimeReady {
					return nil
				}
				err = fmt.Errorf("containerd %s at %s: RuntimeReady is false: %s", view.Version, host, view.ReadyReason)
			}
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
