package toolkit

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/agent/hostfs"
	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/nodefacts/hostfacts"
)

// Status is the toolkit stage's record on the node; its schema is the contract's.
type Status = config.ToolkitStatus

// sameVerdict compares everything but the time, so an unchanged node is not rewritten.
func sameVerdict(s, o Status) bool {
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
	if old, err := hostfacts.ReadToolkitStatus(in.HostRoot); err == nil && sameVerdict(old, st) {
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
