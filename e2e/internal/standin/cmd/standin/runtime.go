package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/gpupolicy/gpupolicy/e2e/internal/standin/layout"
)

// runtimeShim stands in for nvidia-container-runtime: containerd's runc shim calls it as it
// would call runc (the nvidia handler's BinaryName). It logs every call, records the OCI spec
// of each container it creates as <record dir>/<container-id>.json, and execs runc with the
// same arguments. Calls it does not need to look at (state, start, kill, delete, features,
// --version...) pass through untouched.
func runtimeShim(args []string) int {
	const prog = "nvidia-container-runtime"
	line, _ := json.Marshal(args)
	logErr := appendLine(layout.CallLog, line)
	if c, ok := parseCreate(args); ok {
		// A container this stand-in could not record must not run: a test would miss it.
		if logErr != nil {
			return fail(prog, fmt.Errorf("log the call in %s: %w", recordDir(), logErr))
		}
		if err := recordSpec(c); err != nil {
			return fail(prog, err)
		}
	} else if logErr != nil {
		// Any other call goes through whatever happens here: a delete that failed on a full
		// disk would leave the container behind.
		fmt.Fprintf(os.Stderr, "%s (gpupolicy e2e stand-in): warning: call not logged in %s: %v\n", prog, recordDir(), logErr)
	}
	runc := layout.HostRunc
	if r := os.Getenv(layout.RuncEnv); r != "" {
		runc = r
	}
	err := syscall.Exec(runc, append([]string{runc}, args...), os.Environ())
	return fail(prog, fmt.Errorf("exec %s: %w", runc, err))
}

// createCall is what a runc create or run call names.
type createCall struct {
	bundle, id string
}

// runc's global flags and the create/run flags that take a value; every other flag is a
// switch. Flags are accepted with one or two dashes and as --name=value, as runc's CLI does.
var (
	globalValueFlags = map[string]bool{"root": true, "log": true, "log-format": true, "criu": true, "rootless": true}
	createValueFlags = map[string]bool{"bundle": true, "b": true, "console-socket": true, "pid-file": true, "preserve-fds": true}
)

// parseCreate finds the bundle and container id of a runc create or run call; ok is false
// for any other call.
func parseCreate(args []string) (createCall, bool) {
	i := 0
	for ; i < len(args); i++ {
		name, hasValue, isFlag := flagName(args[i])
		if !isFlag {
			break
		}
		if globalValueFlags[name] && !hasValue {
			i++
		}
	}
	if i >= len(args) || (args[i] != "create" && args[i] != "run") {
		return createCall{}, false
	}
	var c createCall
	for i++; i < len(args); i++ {
		name, hasValue, isFlag := flagName(args[i])
		switch {
		case !isFlag:
			c.id = args[i]
		case createValueFlags[name]:
			v := ""
			if hasValue {
				v = args[i][strings.Index(args[i], "=")+1:]
			} else if i+1 < len(args) {
				i++
				v = args[i]
			}
			if name == "bundle" || name == "b" {
				c.bundle = v
			}
		}
	}
	if c.bundle == "" {
		c.bundle = "." // runc's default: the working directory
	}
	return c, c.id != ""
}

// flagName returns a command-line flag's name without dashes and without =value.
func flagName(arg string) (name string, hasValue, isFlag bool) {
	if len(arg) < 2 || arg[0] != '-' {
		return "", false, false
	}
	name = strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-")
	if k, _, found := strings.Cut(name, "="); found {
		return k, true, true
	}
	return name, false, true
}

// recordSpec copies the bundle's config.json to the record directory.
func recordSpec(c createCall) error {
	if strings.ContainsAny(c.id, "/\x00") || c.id == "." || c.id == ".." {
		return fmt.Errorf("container id %q cannot name a record file", c.id)
	}
	spec := filepath.Join(c.bundle, "config.json")
	b, err := os.ReadFile(spec)
	if err != nil {
		return fmt.Errorf("read the OCI spec of container %s: %w", c.id, err)
	}
	if !json.Valid(b) {
		return fmt.Errorf("%s is not JSON", spec)
	}
	dir := recordDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("record the OCI spec of container %s: %w", c.id, err)
	}
	return layout.WriteFileAtomic(filepath.Join(dir, c.id+".json"), b, 0o644)
}
