package toolkit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/agent/hostfs"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// Contract defaults (spec.containerRuntime); host paths, read under HostRoot.
const (
	DefaultConfigPath = "/etc/containerd/config.toml"
	DefaultDropInDir  = "/etc/containerd/conf.d"
	DefaultUnit       = "containerd.service"
)

// Installer installs one rendered drop-in on one node.
type Installer struct {
	HostRoot          string // "/host" in the DaemonSet
	DropInSource      string // the rendered drop-in (ConfigMap mount), a container path
	ConfigPath        string // host path of containerd's main config
	DropInDir         string // host path of the drop-in directory
	ContainerdVersion string // X.Y from the policy
	RestartMode       string // systemd | signal | none
	ContainerdBinary  string // host path; "" finds it, NoBinary never runs it
	SystemdUnit       string // default containerd.service
	ProcDir           string // the host's /proc (hostPID); default /proc
	RestartTimeout    time.Duration
	Logger            *slog.Logger
	// Writer performs every host write; its Step hook lets tests kill the installer mid-write.
	Writer hostfs.Writer
}

// Result says what one Install did.
type Result struct {
	DropInPath string
	Changed    bool // drop-in or main config bytes changed
	Restarted  bool
	Status     Status
	Verified   bool
	Reason     string // why not verified
}

func (in *Installer) host() Host { return Host{Root: in.HostRoot} }

func (in *Installer) procDir() string {
	if in.ProcDir == "" {
		return "/proc"
	}
	return in.ProcDir
}

func (in *Installer) unit() string {
	if in.SystemdUnit == "" {
		return DefaultUnit
	}
	return in.SystemdUnit
}

func (in *Installer) restartTimeout() time.Duration {
	if in.RestartTimeout <= 0 {
		return 90 * time.Second
	}
	return in.RestartTimeout
}

func (in *Installer) log() *slog.Logger {
	l := in.Logger
	if l == nil {
		l = slog.Default()
	}
	return l.With("stage", config.StageToolkit)
}

func (in *Installer) paths() (configPath, dropInHostPath string) {
	configPath, dir := in.ConfigPath, in.DropInDir
	if configPath == "" {
		configPath = DefaultConfigPath
	}
	if dir == "" {
		dir = DefaultDropInDir
	}
	return configPath, filepath.Join(dir, config.DropInFile)
}

// rendered is the drop-in as reviewed in git.
type rendered struct {
	bytes  []byte
	table  table
	sha256 string
}

func (in *Installer) readRendered() (rendered, error) {
	b, err := os.ReadFile(in.DropInSource)
	if err != nil {
		return rendered{}, fmt.Errorf("--drop-in: %w (mount ConfigMap %s key %s there)", err, config.DropInConfigMap, config.DropInFile)
	}
	t, err := parseTOML("--drop-in "+in.DropInSource, b)
	if err != nil {
		return rendered{}, err
	}
	if len(runtimesIn(t)) == 0 {
		return rendered{}, fmt.Errorf("--drop-in %s defines no containerd runtime handler (plugins.<cri plugin>.containerd.runtimes.<name>)", in.DropInSource)
	}
	sum := sha256.Sum256(b)
	return rendered{bytes: b, table: t, sha256: hex.EncodeToString(sum[:])}, nil
}

// version resolves the containerd version and binary; the policy's version must agree with
// the binary's on everything that changes the file we write.
func (in *Installer) version(ctx context.Context) (Version, string, error) {
	want, err := ParseVersion(in.ContainerdVersion)
	if err != nil {
		return Version{}, "", err
	}
	bin, err := in.host().findBinary(in.ContainerdBinary)
	if err != nil || bin == "" {
		return want, "", err
	}
	got, err := in.host().binaryVersion(ctx, bin)
	if err != nil {
		in.log().Warn("cannot read containerd version; trusting --containerd-version", "error", err)
		return want, bin, nil
	}
	if got.ConfigVersion() != want.ConfigVersion() || got.ReplacesPluginTables() != want.ReplacesPluginTables() {
		return Version{}, "", fmt.Errorf("containerd on this node is %s but spec.containerRuntime.version (--containerd-version) is %s: the drop-in was rendered for the wrong containerd; fix the policy or the node", got, want)
	}
	if got != want {
		in.log().Warn("containerd minor differs from the policy", "node", got.String(), "policy", want.String())
	}
	return got, bin, nil
}

// header marks the installed file so a person on the node knows where it comes from.
func header(r rendered, v Version, base *nodeBase) string {
	h := "# Managed by gpupolicy (gpu-node-agent toolkit install). Do not edit: change the GPUPolicy.\n" +
		"# Rendered drop-in sha256: " + r.sha256 + "\n"
	if base != nil {
		h += fmt.Sprintf("# containerd %s replaces whole plugin tables on import: merged with this node's own\n# settings from %s.\n", v, base.Source)
	}
	return h + "\n"
}

// desired computes the bytes the drop-in file must hold.
func (in *Installer) desired(ctx context.Context, r rendered, v Version, bin, configPath, dropIn string) ([]byte, error) {
	if !v.ReplacesPluginTables() {
		return append([]byte(header(r, v, nil)), r.bytes...), nil
	}
	var base nodeBase
	var err error
	if bin != "" {
		base, err = baseFromDump(ctx, in.host(), bin, configPath, dropIn)
	} else {
		base, err = baseFromFiles(in.HostRoot, configPath, dropIn)
	}
	if err != nil {
		return nil, err
	}
	merged := mergeDropIn(r.table, base)
	if _, ok := merged["version"]; !ok {
		merged["version"] = int64(v.ConfigVersion())
	}
	return encode(header(r, v, &base), merged)
}

// ensureImport makes the main config import the drop-in directory, keeping a backup.
func (in *Installer) ensureImport(configPath, dropIn string, v Version) (bool, error) {
	full := hostfs.Join(in.HostRoot, configPath)
	src, err := readOptional(full)
	if err != nil {
		return false, err
	}
	if src != nil {
		t, err := parseTOML(configPath, src)
		if err != nil {
			return false, err
		}
		if importsCovers(t, configPath, dropIn) {
			return false, nil
		}
	}
	out, err := withImport(src, configPath, filepath.Join(filepath.Dir(dropIn), "*.toml"), v.ConfigVersion())
	if err != nil {
		return false, err
	}
	if src != nil {
		backup := full + ".gpupolicy-backup-" + time.Now().UTC().Format("20060102T150405Z")
		if _, err := in.Writer.WriteFile(backup, src, 0o600); err != nil {
			return false, fmt.Errorf("back up %s: %w", configPath, err)
		}
		in.log().Info("backed up containerd config before adding the import", "backup", backup)
	}
	return in.Writer.WriteFile(full, out, 0o644)
}

// Install converges the node once: drop-in, import, restart if needed, verify, status.
func (in *Installer) Install(ctx context.Context) (Result, error) {
	log := in.log()
	r, err := in.readRendered()
	if err != nil {
		return Result{}, err
	}
	v, bin, err := in.version(ctx)
	if err != nil {
		return Result{}, err
	}
	configPath, dropIn := in.paths()
	res := Result{DropInPath: dropIn}
	for _, dir := range []string{filepath.Dir(dropIn), filepath.Dir(configPath), filepath.Dir(scratchConfig)} {
		if err := hostfs.CleanTemps(hostfs.Join(in.HostRoot, dir)); err != nil {
			return res, err
		}
	}
	main, err := loadMain(in.HostRoot, configPath)
	if err != nil {
		return res, err
	}
	if _, has := main["version"]; len(main) > 0 && (!has || configVersion(main) < 2) {
		return res, fmt.Errorf("%s is a version 1 containerd config (no `version = 2`): gpupolicy does not edit version 1 configs; rewrite it as version 2 (`containerd config dump` prints the migrated form), review it, and retry", configPath)
	}
	want, err := in.desired(ctx, r, v, bin, configPath, dropIn)
	if err != nil {
		return res, err
	}
	if bin != "" {
		if err := preflight(ctx, in.host(), bin, configPath, dropIn, want); err != nil {
			return res, err
		}
	}
	// The drop-in first, the import second: a crash in between leaves a file nobody imports.
	wroteDropIn, err := in.Writer.WriteFile(hostfs.Join(in.HostRoot, dropIn), want, 0o644)
	if err != nil {
		return res, err
	}
	wroteImport, err := in.ensureImport(configPath, dropIn, v)
	if err != nil {
		return res, err
	}
	res.Changed = wroteDropIn || wroteImport
	if res.Changed {
		log.Info("containerd drop-in installed", "path", dropIn, "renderedSHA256", r.sha256, "importAdded", wroteImport)
	}
	fi, err := os.Stat(hostfs.Join(in.HostRoot, dropIn))
	if err != nil {
		return res, err
	}
	// Restart when containerd has not loaded these bytes: they changed now, or a previous
	// run wrote them and died before the restart.
	loaded, visible, err := in.loadedSince(ctx, fi.ModTime(), false)
	if err != nil {
		return res, err
	}
	if res.Changed || (visible && !loaded) {
		if in.RestartMode != RestartNone {
			log.Info("restarting containerd", "mode", in.RestartMode)
			// Wait for a containerd younger than the restart itself: the old process may
			// still be shutting down (signal mode) and may be younger than the files.
			restartedAt := time.Now()
			if err := in.restart(ctx); err != nil {
				return res, err
			}
			res.Restarted = true
			if loaded, visible, err = in.loadedSince(ctx, restartedAt, true); err != nil {
				return res, err
			}
		}
	}
	if visible && !loaded {
		res.Reason = fmt.Sprintf("containerd is running a configuration older than %s (restart-mode %s): restart containerd", dropIn, in.RestartMode)
	} else if res, err = in.verify(ctx, res, r, v, bin, configPath, want, visible); err != nil {
		return res, err
	}
	if !res.Verified {
		// A stale status could keep the gate open for a handler containerd does not have.
		if _, err := in.Writer.Remove(hostfs.Join(in.HostRoot, config.ToolkitStatusFile)); err != nil {
			return res, err
		}
	}
	return res, nil
}

// verify proves that containerd's configuration has every handler of the drop-in, then
// records the verdict in the status file.
func (in *Installer) verify(ctx context.Context, res Result, r rendered, v Version, bin, configPath string, installed []byte, running bool) (Result, error) {
	var effective table
	var by string
	if bin != "" {
		out, err := in.host().dump(ctx, bin, configPath)
		if err != nil {
			return res, err
		}
		if effective, err = parseTOML("containerd config dump", out); err != nil {
			return res, err
		}
		by = "containerd config dump"
	} else {
		base, err := baseFromFiles(in.HostRoot, configPath, "")
		if err != nil {
			return res, err
		}
		effective, by = table{"plugins": base.Plugins}, "config files (containerd binary not found)"
	}
	if running {
		by += "; running containerd started after the drop-in was written"
	} else {
		by += "; no containerd process visible (hostPID?)"
	}
	want := runtimesIn(r.table)
	have := runtimesIn(effective)
	for _, h := range want {
		if !slices.Contains(have, h) {
			res.Reason = fmt.Sprintf("containerd configuration lacks runtime handler %q after install (handlers: %s)", h, strings.Join(have, ", "))
			return res, nil
		}
	}
	sum := sha256.Sum256(installed)
	st := Status{
		Handlers: want, DropInSHA256: r.sha256, InstalledSHA256: hex.EncodeToString(sum[:]),
		ContainerdVersion: v.String(), VerifiedBy: by, Time: time.Now().UTC().Truncate(time.Second),
	}
	if old, err := ReadStatus(in.HostRoot); err == nil && old.sameVerdict(st) {
		st.Time = old.Time
	} else if err := WriteStatus(in.HostRoot, st); err != nil {
		return res, err
	}
	res.Status, res.Verified = st, true
	return res, nil
}

// Uninstall removes the drop-in and the status file (the import of the directory stays: it
// matches nothing of ours any more) and restarts containerd per mode if something was removed.
func (in *Installer) Uninstall(ctx context.Context) (bool, error) {
	_, dropIn := in.paths()
	removed, err := in.Writer.Remove(hostfs.Join(in.HostRoot, dropIn))
	if err != nil {
		return false, err
	}
	if _, err := in.Writer.Remove(hostfs.Join(in.HostRoot, config.ToolkitStatusFile)); err != nil {
		return removed, err
	}
	if removed {
		in.log().Info("containerd drop-in removed", "path", dropIn)
		if err := in.restart(ctx); err != nil {
			return removed, err
		}
	}
	return removed, nil
}
