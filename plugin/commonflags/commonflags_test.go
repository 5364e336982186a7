package commonflags

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"
)

func parse(t *testing.T, args ...string) *Flags {
	t.Helper()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := Register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestLogger(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    string // in the output of an Info and a Debug line
		missing string
	}{
		{nil, `{"time":`, "debug line"},
		{[]string{"--log-format", "text"}, "level=INFO msg=\"info line\"", "debug line"},
		{[]string{"--log-level", "debug"}, `"msg":"debug line"`, ""},
		{[]string{"--log-level", "warn"}, "", "info line"},
	} {
		var b bytes.Buffer
		log, err := parse(t, tc.args...).Logger(&b)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		log.Info("info line")
		log.Debug("debug line")
		if !strings.Contains(b.String(), tc.want) || (tc.missing != "" && strings.Contains(b.String(), tc.missing)) {
			t.Errorf("%v: %q", tc.args, b.String())
		}
	}
	for args, want := range map[string]string{
		"--log-format=xml":   `--log-format "xml": want json or text`,
		"--log-level=loud":   `--log-level "loud": want debug, info, warn or error`,
		"--log-level=info+2": `--log-level "info+2": want debug, info, warn or error`,
	} {
		if _, err := parse(t, args).Logger(io.Discard); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %s", args, err, want)
		}
	}
}

func TestVersion(t *testing.T) {
	var b bytes.Buffer
	if parse(t).PrintVersion(&b, "gpu-x") || b.Len() > 0 {
		t.Fatal("printed a version without --version")
	}
	if !parse(t, "--version").PrintVersion(&b, "gpu-x") || !strings.HasPrefix(b.String(), "gpu-x v") || !strings.Contains(b.String(), " (go") {
		t.Fatalf("--version: %q", b.String())
	}
}
