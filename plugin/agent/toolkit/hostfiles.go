package toolkit

import (
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/agent/hostfs"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// The host files Install writes besides the drop-in: the main config's import edit and its
// backup; which of them must be writable before anything changes; and where a killed run may
// have left temporary files (beside a link's target too, since writes go through links).

// importEdit is the main config's edit: the bytes before and after adding the import of the
// drop-in directory, and the backup's host path (beside the config's own name, so a config
// that is a link is backed up where a person looks for it).
type importEdit struct {
	src, out []byte
	backup   string
}

// planImport computes the main config edit; nil when the config already imports the drop-in.
func (in *Installer) planImport(configPath, dropIn string, v Version) (*importEdit, error) {
	src, err := readOptional(in.HostRoot, configPath)
	if err != nil {
		return nil, err
	}
	if src != nil {
		t, err := parseTOML(configPath, src)
		if err != nil {
			return nil, err
		}
		if importsCovers(t, configPath, dropIn) {
			return nil, nil
		}
	}
	out, err := withImport(src, configPath, filepath.Join(filepath.Dir(dropIn), "*.toml"), v.ConfigVersion())
	if err != nil {
		return nil, err
	}
	e := &importEdit{src: src, out: out}
	if src != nil {
		e.backup = configPath + ".gpupolicy-backup-" + time.Now().UTC().Format("20060102T150405Z")
	}
	return e, nil
}

// backUp writes the backup of the main config the edit changes.
func (in *Installer) backUp(configPath string, e *importEdit) error {
	if e == nil || e.backup == "" {
		return nil
	}
	if _, err := in.Writer.WriteOwned(in.HostRoot, e.backup, e.src, 0o600); err != nil {
		return fmt.Errorf("back up %s: %w", configPath, err)
	}
	in.log().Info("backed up containerd config before adding the import", "backup", e.backup)
	return nil
}

// writable refuses, before anything on the node changes, when a file Install may write cannot
// be written: a read-only mount, or a link into one (Flatcar's /etc/containerd/config.toml);
// or when one of the files gpupolicy owns (all but the main config) is a symbolic link
// (hostfs.Owned).
func (in *Installer) writable(configPath, dropIn, bin string, e *importEdit) error {
	files := []string{dropIn, config.ToolkitStatusFile}
	if bin != "" {
		files = append(files, scratchConfig, scratchDropIn)
	}
	if e != nil {
		files = append(files, configPath)
		if e.backup != "" {
			files = append(files, e.backup)
		}
	}
	if in.CDISpec != "" {
		files = append(files, in.CDISpec, cdiScratch)
	}
	for _, f := range files {
		if f != configPath {
			if err := hostfs.Owned(in.HostRoot, f); err != nil {
				return fmt.Errorf("%w; nothing on the node was changed", err)
			}
		}
		if err := hostfs.Writable(in.HostRoot, f); err != nil {
			return fmt.Errorf("%w; nothing on the node was changed", err)
		}
	}
	return nil
}

// owned refuses, before Uninstall removes anything, a symbolic link at a file it removes.
func (in *Installer) owned(dropIn string) error {
	files := []string{dropIn, config.ToolkitStatusFile}
	if in.CDISpec != "" {
		files = append(files, in.CDISpec)
	}
	for _, f := range files {
		if err := hostfs.Owned(in.HostRoot, f); err != nil {
			return fmt.Errorf("%w; nothing on the node was changed", err)
		}
	}
	return nil
}

// tempDirs are the host directories a killed Install may have left temporary files in: those
// of the files it writes and, for a file reached through a link, those of the link's target.
func (in *Installer) tempDirs(configPath, dropIn string) ([]string, error) {
	files := []string{dropIn, configPath, config.ToolkitStatusFile, scratchConfig}
	if in.CDISpec != "" {
		files = append(files, in.CDISpec)
	}
	var dirs []string
	for _, f := range files {
		p, err := hostfs.Resolve(in.HostRoot, f)
		if err != nil {
			return nil, err
		}
		for _, d := range []string{filepath.Dir(p.Host), filepath.Dir(p.Real)} {
			if !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	return dirs, nil
}
