package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/gpupolicy/gpupolicy/e2e/internal/standin/layout"
)

// hookSubcommands are nvidia-cdi-hook's subcommands that NVIDIA's CDI specs run.
var hookSubcommands = []string{"chmod", "create-symlinks", "disable-device-node-modification", "enable-cuda-compat", "update-ldcache"}

// cdiHook stands in for nvidia-cdi-hook: runc runs it as an OCI createContainer hook with the
// container's state on stdin. It changes nothing in the container; it appends the call and
// the container's id to layout.HookLog, so a test sees that the spec's hook path resolved on
// the node and ran.
func cdiHook(args []string) int {
	const prog = "nvidia-cdi-hook"
	if len(args) == 0 || !slices.Contains(hookSubcommands, args[0]) {
		fmt.Fprintf(os.Stderr, "%s (gpupolicy e2e stand-in): unsupported hook %q (supported: %v)\n", prog, args, hookSubcommands)
		return 2
	}
	var state struct {
		ID     string `json:"id"`
		Bundle string `json:"bundle"`
	}
	if b, err := io.ReadAll(os.Stdin); err == nil && len(b) > 0 {
		if err := json.Unmarshal(b, &state); err != nil {
			return fail(prog, fmt.Errorf("the container state on stdin is not JSON: %w", err))
		}
	}
	line, _ := json.Marshal(map[string]any{"args": args, "id": state.ID, "bundle": state.Bundle})
	if err := appendLine(layout.HookLog, line); err != nil {
		return fail(prog, fmt.Errorf("log the hook in %s: %w", recordDir(), err))
	}
	return 0
}
