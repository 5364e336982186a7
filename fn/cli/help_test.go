package cli

import (
	"regexp"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/internal/fntest"
)

// flagLine is a flag's line in PrintDefaults output: "  -name PLACEHOLDER".
var flagLine = regexp.MustCompile(`(?m)^  -(\S+)(?: (.*))?$`)

// TestHelpPlaceholders: every subcommand's --help names each flag's value with one word (the
// flag package takes a `quoted` word of the usage text as the placeholder, so a quoted phrase
// shows as "-f gpupolicy-fn render -o"), and doctor's usage line lists every flag.
func TestHelpPlaceholders(t *testing.T) {
	all := map[string]command{"fleet render": FleetRender, "fleet diff": FleetDiff, "fleet push": FleetPush}
	for name, cmd := range commands {
		if name != "fleet" { // its subcommands have the flags
			all[name] = cmd
		}
	}
	for name, cmd := range all {
		_, out, errs := fntest.Run(fntest.Command(cmd), "--help")
		help := out + errs
		flags := flagLine.FindAllStringSubmatch(help, -1)
		if len(flags) == 0 {
			t.Errorf("%s --help lists no flags:\n%s", name, help)
		}
		for _, f := range flags {
			if strings.Contains(f[2], " ") {
				t.Errorf("%s --help: flag -%s has the placeholder %q; quote one word in its usage", name, f[1], f[2])
			}
			if name == "doctor" && !strings.Contains(strings.SplitN(help, "\n", 2)[0], "-"+f[1]+" ") {
				t.Errorf("doctor's usage line lacks -%s", f[1])
			}
		}
	}
}
