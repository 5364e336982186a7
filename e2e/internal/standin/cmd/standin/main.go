// Command standin is every program of the stand-in images, chosen by the name it runs as
// (argv[0]'s base name, or the first argument when run as "standin"): one static binary, one
// build, copied under each name. See package standin for the images that hold it.
package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpupolicy/gpupolicy/e2e/internal/standin/layout"
)

// programs maps each name to its main; each returns the process's exit code.
var programs = map[string]func(args []string) int{
	"pause":                    pause,
	"nvidia-ctk-installer":     installToolkit,
	"nvidia-container-runtime": runtimeShim,
	"nvidia-ctk":               ctk,
	"nvidia-cdi-hook":          cdiHook,
	"workload":                 workload,
}

func main() {
	name, args := filepath.Base(os.Args[0]), os.Args[1:]
	if name == "standin" && len(args) > 0 {
		name, args = args[0], args[1:]
	}
	run, ok := programs[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "standin: unknown program %q: run it as one of %s (argv[0]'s base name, or standin NAME ARGS...)\n",
			name, strings.Join(slices.Sorted(maps.Keys(programs)), ", "))
		os.Exit(2)
	}
	os.Exit(run(args))
}

// fail prints a program's error the way its callers show it (kubelet events, ctr, the
// agent's log) and returns the exit code.
func fail(prog string, err error) int {
	fmt.Fprintf(os.Stderr, "%s (gpupolicy e2e stand-in): %v\n", prog, err)
	return 1
}

// recordDir is layout.RecordDir unless a test overrides it.
func recordDir() string {
	if d := os.Getenv(layout.RecordDirEnv); d != "" {
		return d
	}
	return layout.RecordDir
}

// appendLine appends one line to name in the record directory; one write of a short line
// with O_APPEND, so concurrent callers do not interleave.
func appendLine(name string, line []byte) error {
	dir := recordDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(append(line, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
