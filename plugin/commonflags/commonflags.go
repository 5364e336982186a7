// Package commonflags holds the flags every node program takes the same way: --log-format
// (json for the cluster's log pipeline, text for a person at a terminal), --log-level and
// --version. One definition keeps their names, defaults and errors identical across
// gpu-device-plugin, gpu-exporter and gpu-node-agent.
package commonflags

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"

	"github.com/gpupolicy/gpupolicy/version"
)

// Flags are the registered flag values.
type Flags struct {
	format, level *string
	version       *bool
}

// Register adds --log-format, --log-level and --version to fs.
func Register(fs *flag.FlagSet) *Flags {
	return &Flags{
		format:  fs.String("log-format", "json", "log format: json (one object per line) or text"),
		level:   fs.String("log-level", "info", "least severity logged: debug, info, warn or error"),
		version: fs.Bool("version", false, "print the version and exit"),
	}
}

// PrintVersion writes the version line of prog and reports whether --version was given; the
// caller then exits 0.
func (f *Flags) PrintVersion(w io.Writer, prog string) bool {
	if !*f.version {
		return false
	}
	fmt.Fprintln(w, VersionLine(prog))
	return true
}

// VersionLine is "<prog> <release> (<go version> <os>/<arch>)".
func VersionLine(prog string) string {
	return fmt.Sprintf("%s %s (%s %s/%s)", prog, version.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// Logger builds the logger the flags ask for, writing to w; an error names the flag and the
// values it takes.
func (f *Flags) Logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(*f.level)); err != nil || strings.ContainsAny(*f.level, "+-") {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", *f.level)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch *f.format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want json or text", *f.format)
}
