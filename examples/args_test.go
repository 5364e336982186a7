package examples

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/validate"
	agentcli "github.com/gpupolicy/gpupolicy/plugin/agent/cli"
	deviceplugincli "github.com/gpupolicy/gpupolicy/plugin/deviceplugin/cli"
	exportercli "github.com/gpupolicy/gpupolicy/plugin/exporter/cli"
)

// ourPrograms parse a container's command line (without the program name) with the flag sets
// their main uses: a flag the function renders that the binary does not define, or a value the
// binary refuses (a relative path, an interval out of range), fails here instead of as a
// crash-looping DaemonSet.
var ourPrograms = map[string]func(args []string) error{
	"gpu-node-agent":    agentcli.CheckArgs,
	"gpu-device-plugin": deviceplugincli.CheckArgs,
	"gpu-exporter":      exportercli.CheckArgs,
}

// TestRenderedArgsParseWithTheRealFlags renders every example, preset and golden test policy
// and parses the command and args of every container (init containers too) that runs one of
// this module's programs with that program's own flag set.
func TestRenderedArgsParseWithTheRealFlags(t *testing.T) {
	paths := slices.Clone(examplePolicies)
	for _, glob := range []string{"../policies/*.yaml", "../fn/render/testdata/*/policy.yaml"} {
		m, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, m...)
	}
	seen := map[string]int{}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		_, objs, res := pipeline.Load(data, validate.Options{Now: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)})
		if res.HasErrors() {
			t.Fatalf("%s: %s", path, res.Text(path))
		}
		for _, o := range objs {
			spec := podSpec(o.Obj)
			if spec == nil {
				continue
			}
			for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
				line := slices.Concat(c.Command, c.Args)
				if len(line) == 0 {
					continue
				}
				check, ours := ourPrograms[filepath.Base(line[0])]
				if !ours {
					continue // NVIDIA's images: their own entrypoints
				}
				seen[filepath.Base(line[0])]++
				if err := check(line[1:]); err != nil {
					t.Errorf("%s: %s %s/%s container %s: %q does not parse: %v", path, o.Obj.GetObjectKind().GroupVersionKind().Kind,
						o.Obj.GetNamespace(), o.Obj.GetName(), c.Name, strings.Join(line, " "), err)
				}
			}
		}
	}
	for prog := range ourPrograms {
		if seen[prog] == 0 {
			t.Errorf("no rendered container runs %s: the test would pass whatever its flags", prog)
		}
	}
}

// TestCheckArgsRefusesWhatMainRefuses: the checker is the programs' own parser, so a renamed
// flag or a bad value fails it.
func TestCheckArgsRefusesWhatMainRefuses(t *testing.T) {
	for _, c := range []struct {
		prog string
		args []string
		want string
	}{
		{"gpu-node-agent", []string{"labels", "--intervall", "60s"}, "unknown flag --intervall"},
		{"gpu-node-agent", []string{"toolkit", "install", "--host-root", "host"}, "relative path"},
		{"gpu-node-agent", []string{"relabel"}, "unknown subcommand"},
		{"gpu-device-plugin", []string{"--plugin-dir", "plugins"}, "relative path"},
		{"gpu-device-plugin", []string{"dra", "--plugin-dir", "/x"}, "flag provided but not defined: -plugin-dir"},
		{"gpu-exporter", []string{"--interval", "1ms"}, "interval"},
	} {
		err := ourPrograms[c.prog](c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v: %v, want an error with %q", c.prog, c.args, err, c.want)
		}
	}
}

// podSpec is the pod template of a workload object, nil for anything else. The function
// renders DaemonSets only; a Deployment is here for when it does not.
func podSpec(obj any) *corev1.PodSpec {
	switch o := obj.(type) {
	case *appsv1.DaemonSet:
		return &o.Spec.Template.Spec
	case *appsv1.Deployment:
		return &o.Spec.Template.Spec
	}
	return nil
}
