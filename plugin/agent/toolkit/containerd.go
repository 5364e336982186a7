// Package toolkit installs the reviewed containerd drop-in on a node: merged with the node's
// own CRI plugin sections where containerd < 2.1 would otherwise replace them, imported from
// the main config, written atomically and idempotently, containerd restarted only when the
// bytes changed, and the handler verified in the running daemon through its CRI before the
// status file tells the gate.
package toolkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/agent/hostfs"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// Version is a containerd major.minor.
type Version struct{ Major, Minor int }

var versionRE = regexp.MustCompile(`^v?(\d+)\.(\d+)(?:\.\d+)?`)

// ParseVersion accepts "X.Y" (and "X.Y.Z", "vX.Y.Z").
func ParseVersion(s string) (Version, error) {
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		return Version{}, fmt.Errorf("containerd version %q is not X.Y (set spec.containerRuntime.version / --containerd-version, e.g. 1.7 or 2.1)", s)
	}
	maj, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return Version{maj, minor}, nil
}

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// Less reports v < o.
func (v Version) Less(o Version) bool {
	return v.Major < o.Major || (v.Major == o.Major && v.Minor < o.Minor)
}

// ConfigVersion is the config file schema containerd v reads: 2 before 2.0, 3 from 2.0.
func (v Version) ConfigVersion() int { return config.ContainerdConfigVersion(v.Major) }

// ReplacesPluginTables is true for containerd < 2.1: an imported file's plugin table replaces
// the main config's table of the same plugin as a whole instead of merging into it.
func (v Version) ReplacesPluginTables() bool { return v.Less(Version{2, 1}) }

// binaryCandidates are where distributions and the upstream tarball put containerd.
var binaryCandidates = []string{"/usr/bin/containerd", "/usr/local/bin/containerd", "/bin/containerd", "/opt/bin/containerd"}

// NoBinary as --containerd-bin forbids running the node's containerd binary.
const NoBinary = "none"

// Host runs host programs: inside a chroot at the host root when that is not "/", so the
// node's own binaries see the node's own paths.
type Host struct {
	Root string
}

// findBinary returns the host path of containerd, or "" when it is not installed.
func (h Host) findBinary(flag string) (string, error) {
	switch flag {
	case NoBinary:
		return "", nil
	case "":
		for _, c := range binaryCandidates {
			if st, err := hostfs.Stat(h.Root, c); err == nil && st.Mode().IsRegular() {
				return c, nil
			}
		}
		return "", nil
	default:
		if _, err := hostfs.Stat(h.Root, flag); err != nil {
			return "", fmt.Errorf("--containerd-bin %s: %w", flag, err)
		}
		return flag, nil
	}
}

// Command runs a host program (absolute host path) and returns its stdout.
func (h Host) Command(ctx context.Context, path string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	if h.Root != "" && h.Root != "/" {
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: h.Root}
		cmd.Dir = "/"
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %v: %w: %s", path, args, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

// dump runs `containerd --config <hostPath> config dump`: containerd's own view of a config
// with its imports resolved, old schemas migrated and defaults filled in.
func (h Host) dump(ctx context.Context, bin, configHostPath string) ([]byte, error) {
	out, err := h.Command(ctx, bin, "--config", configHostPath, "config", "dump")
	if err != nil {
		return nil, fmt.Errorf("containerd config dump: %w", err)
	}
	return out, nil
}

// binaryVersion asks the binary for its version ("containerd github.com/... 1.6.20~ds1 ...").
func (h Host) binaryVersion(ctx context.Context, bin string) (Version, error) {
	out, err := h.Command(ctx, bin, "--version")
	if err != nil {
		return Version{}, err
	}
	for _, f := range bytes.Fields(out) {
		if v, err := ParseVersion(string(f)); err == nil {
			return v, nil
		}
	}
	return Version{}, fmt.Errorf("cannot read a version from %q", bytes.TrimSpace(out))
}

// readOptional returns a host file's bytes, or nil when it does not exist.
func readOptional(root, hostPath string) ([]byte, error) {
	b, err := hostfs.ReadFile(root, hostPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// checkNodeConfig refuses a node main config (already parsed) that containerd v would not read
// as the drop-in expects. A missing, empty or comments-only file is containerd's defaults and
// passes. gpupolicy does not edit version 1 configs. A config of another version than
// containerd v reads means --containerd-version (spec.containerRuntime.version) is not this
// node's containerd: containerd 1.x cannot load a version 3 file at all, and containerd 2.x
// only migrates a version 2 file in memory on every start, while the installed drop-in (and
// below 2.1 the merge with the node's plugin tables) is in version 3's plugin names.
func checkNodeConfig(configHostPath string, main table, v Version) error {
	if len(main) == 0 {
		return nil
	}
	raw, has := main["version"]
	if !has {
		return fmt.Errorf("%s is a version 1 containerd config (no `version = %d`): gpupolicy does not edit version 1 configs; rewrite it as version %d (`containerd config dump` prints the migrated form), review it, and retry", configHostPath, v.ConfigVersion(), v.ConfigVersion())
	}
	found, ok := raw.(int64)
	if !ok {
		return fmt.Errorf("%s: version = %#v is not an integer: containerd reads `version = %d` (a bare number) for containerd %s; fix the node config", configHostPath, raw, v.ConfigVersion(), v)
	}
	if found < 2 {
		return fmt.Errorf("%s is a version %d containerd config: gpupolicy does not edit version 1 configs; rewrite it as version %d (`containerd config dump` prints the migrated form), review it, and retry", configHostPath, found, v.ConfigVersion())
	}
	if want := v.ConfigVersion(); int(found) != want {
		fix := fmt.Sprintf("re-render the policy with spec.containerRuntime.version set to this node's containerd minor (`containerd --version`) if the node does not run containerd %s", v)
		if int(found) < want {
			fix += fmt.Sprintf(", or, if it does, migrate the node config to version %d (`containerd config migrate` prints it), review it and retry", want)
		} else {
			fix += ", or fix the node config"
		}
		return fmt.Errorf("%s has config version %d but containerd %s (--containerd-version, spec.containerRuntime.version) reads version %d: %s", configHostPath, found, v, want, fix)
	}
	return nil
}

// checkDropInVersion refuses a rendered drop-in in another config version than containerd v
// reads: the function writes it in the version of spec.containerRuntime.version, so a
// mismatch means the policy and --containerd-version disagree (containerd 1.x cannot load a
// version 3 file; a version 2 file's plugin names are not those containerd 2.x looks up).
func checkDropInVersion(source string, t table, v Version) error {
	want := v.ConfigVersion()
	if found, ok := t["version"].(int64); !ok || int(found) != want {
		got := "no integer `version`"
		if ok {
			got = fmt.Sprintf("config version %d", found)
		}
		return fmt.Errorf("--drop-in %s has %s but containerd %s (--containerd-version) reads version %d: the drop-in and --containerd-version come from different policies; render both from one policy whose spec.containerRuntime.version is this node's containerd minor", source, got, v, want)
	}
	return nil
}
