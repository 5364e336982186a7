//go:build toolkitpeer

// Command toolkit-config loads an nvidia-container-runtime config.toml with NVIDIA's own loader
// (github.com/NVIDIA/nvidia-container-toolkit/api/config/v1, what the installer's
// GetInstalledConfig and the runtime use) and prints the loaded Config as JSON: a file the loader
// refuses, or values it reads differently from what was meant, fail the test that runs it
// (fn/render/toolkitpeer_test.go). build.sh builds it in a module of its own with -tags
// toolkitpeer; it is not part of this module.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	config "github.com/NVIDIA/nvidia-container-toolkit/api/config/v1"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: toolkit-config CONFIG.toml")
		os.Exit(2)
	}
	toml, err := config.New(config.WithConfigFile(os.Args[1]), config.WithRequired(true))
	if err != nil {
		fmt.Fprintln(os.Stderr, "toolkit-config:", err)
		os.Exit(1)
	}
	cfg, err := toml.Config()
	if err != nil {
		fmt.Fprintln(os.Stderr, "toolkit-config:", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "toolkit-config:", err)
		os.Exit(1)
	}
}
