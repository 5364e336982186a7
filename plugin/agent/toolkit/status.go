package toolkit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/agent/hostfs"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// Status is the toolkit stage's verdict on the node (config.ToolkitStatusFile). Verified is
// true only after the running containerd showed, through its CRI, the drop-in's handlers
// with the drop-in's settings, so the unprivileged gate can trust it without the containerd
// socket; otherwise Reason says why the last install did not get there.
type Status struct {
	// Verified: the gate may open (for this DropInSHA256 and Handlers only).
	Verified bool `json:"verified"`
	// Reason is why the last install was not verified ("" when Verified).
	Reason string `json:"reason,omitempty"`
	// Handlers are the runtime handlers of the drop-in that containerd has loaded (none
	// when not Verified).
	Handlers []string `json:"handlers"`
	// DropInSHA256 is the sha256 (hex) of the rendered drop-in (config.AgentToolkit.DropInSHA256).
	DropInSHA256 string `json:"dropInSHA256"`
	// InstalledSHA256 is the sha256 of the file in dropInDir (differs when merged).
	InstalledSHA256   string `json:"installedSHA256"`
	ContainerdVersion string `json:"containerdVersion"`
	VerifiedBy        string `json:"verifiedBy"`
	// Restarted: this install restarted containerd for InstalledSHA256; a run that finds the
	// same bytes not in effect does not restart again (each --watch interval would).
	Restarted bool      `json:"restarted,omitempty"`
	Time      time.Time `json:"time"`
}

// sameVerdict compares everything but the time, so an unchanged node is not rewritten.
func (s Status) sameVerdict(o Status) bool {
	s.Time, o.Time = time.Time{}, time.Time{}
	a, _ := json.Marshal(s)
	b, _ := json.Marshal(o)
	return string(a) == string(b)
}

// WriteStatus atomically writes st to hostRoot + config.ToolkitStatusFile.
func WriteStatus(hostRoot string, st Status) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	_, err = hostfs.Writer{}.WriteOwned(hostRoot, config.ToolkitStatusFile, append(b, '\n'), 0o644)
	return err
}

// ErrNoStatus means the toolkit stage has not completed on this node.
var ErrNoStatus = errors.New("no toolkit status file: `gpu-node-agent toolkit install` has not verified containerd on this node yet")

// ReadStatus reads hostRoot + config.ToolkitStatusFile.
func ReadStatus(hostRoot string) (Status, error) {
	b, err := hostfs.ReadFile(hostRoot, config.ToolkitStatusFile)
	if errors.Is(err, fs.ErrNotExist) {
		return Status{}, ErrNoStatus
	}
	if err != nil {
		return Status{}, err
	}
	var st Status
	if err := json.Unmarshal(b, &st); err != nil {
		return Status{}, fmt.Errorf("%s is not valid JSON: %w (remove it; the toolkit stage rewrites it)", config.ToolkitStatusFile, err)
	}
	return st, nil
}

// evidence names what of the CRI status proved the handler.
func evidence(view criView) string {
	if view.FromHandlers {
		return "runtime_handlers; handler settings from info.config"
	}
	return "handler settings from info.config"
}

// writeStatus writes st unless the file already holds the same verdict (an unchanged node is
// not rewritten every --watch interval).
func (in *Installer) writeStatus(st Status) error {
	st.Time = time.Now().UTC().Truncate(time.Second)
	if old, err := ReadStatus(in.HostRoot); err == nil && old.sameVerdict(st) {
		return nil
	}
	return WriteStatus(in.HostRoot, st)
}

// recordFailure records why Install failed in the status file (closed: Verified false), so
// the gate's reason, the node's Events and doctor name it, and returns err. A canceled run
// records nothing: it did not fail.
func (in *Installer) recordFailure(st Status, err error) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return err
	}
	st.Verified, st.Handlers, st.VerifiedBy, st.Reason = false, nil, "", err.Error()
	if werr := in.writeStatus(st); werr != nil {
		in.log().Warn("cannot record the failure in the status file", "path", config.ToolkitStatusFile, "error", werr)
	}
	return err
}
