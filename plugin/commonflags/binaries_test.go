package commonflags_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	agent "github.com/gpupolicy/gpupolicy/plugin/agent/cli"
	deviceplugin "github.com/gpupolicy/gpupolicy/plugin/deviceplugin/cli"
	exporter "github.com/gpupolicy/gpupolicy/plugin/exporter/cli"
)

type mainFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) int

// TestEveryNodeProgram: the three node programs take --version, --log-format and --log-level
// alike (the agent on each subcommand), document them in --help, and refuse a bad value with
// the same message before doing any work.
func TestEveryNodeProgram(t *testing.T) {
	for _, p := range []struct {
		name   string
		main   mainFunc
		prefix []string // the agent's flags belong to a subcommand
	}{
		{"gpu-device-plugin", deviceplugin.Main, nil},
		{"gpu-exporter", exporter.Main, nil},
		{"gpu-node-agent", agent.Main, []string{"labels"}},
	} {
		run := func(args ...string) (int, string, string) {
			var out, errs bytes.Buffer
			code := p.main(context.Background(), append(append([]string{}, p.prefix...), args...), &out, &errs)
			return code, out.String(), errs.String()
		}
		if code, out, _ := run("--version"); code != 0 || !strings.HasPrefix(out, p.name+" v") || !strings.Contains(out, " (go") {
			t.Errorf("%s --version: exit %d, %q", p.name, code, out)
		}
		if code, _, errs := run("--log-format", "xml"); code != 2 || !strings.Contains(errs, `--log-format "xml": want json or text`) {
			t.Errorf("%s --log-format xml: exit %d, %q", p.name, code, errs)
		}
		if code, _, errs := run("--log-level", "loud"); code != 2 || !strings.Contains(errs, `--log-level "loud": want debug, info, warn or error`) {
			t.Errorf("%s --log-level loud: exit %d, %q", p.name, code, errs)
		}
		_, out, errs := run("--help")
		for _, f := range []string{"-log-format", "-log-level", "-version"} {
			if !strings.Contains(out+errs, f) {
				t.Errorf("%s --help does not document %s", p.name, f)
			}
		}
	}
	var out bytes.Buffer
	if code := agent.Main(context.Background(), []string{"--version"}, &out, io.Discard); code != 0 || !strings.HasPrefix(out.String(), "gpu-node-agent v") {
		t.Errorf("gpu-node-agent --version: exit %d, %q", code, out.String())
	}
}
