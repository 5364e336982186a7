package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/gpupolicy/gpupolicy/e2e/internal/standin/layout"
)

// installToolkit stands in for NVIDIA's toolkit installer (nvidia-ctk-installer) as
// gpupolicy runs it (the toolkit-copy init container): it copies the toolkit's programs into
// $TOOLKIT_INSTALL_DIR/toolkit and, with NO_DAEMON, exits. Unlike NVIDIA's it never writes a
// containerd config, whatever RUNTIME_CONFIG, NO_RUNTIME_CONFIG or RUNTIME say: gpupolicy's
// agent installs the drop-in, and a test must see that the agent's is the only one.
func installToolkit(args []string) int {
	const prog = "nvidia-ctk-installer"
	if len(args) > 0 {
		return fail(prog, fmt.Errorf("takes no arguments (got %q): it is configured by environment, as gpupolicy's toolkit-copy init container sets it", args))
	}
	noDaemon, err := envBool("NO_DAEMON")
	if err != nil {
		return fail(prog, err)
	}
	root := os.Getenv("TOOLKIT_INSTALL_DIR")
	if root == "" || !filepath.IsAbs(root) {
		return fail(prog, fmt.Errorf("TOOLKIT_INSTALL_DIR=%q: set it to the absolute path the host's install directory is mounted at (gpupolicy renders /usr/local/nvidia)", root))
	}
	dest := filepath.Join(root, "toolkit")
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return fail(prog, fmt.Errorf("TOOLKIT_INSTALL_DIR=%s is not writable: %w (is the host directory mounted read-write?)", root, err))
	}
	for _, name := range layout.ToolkitBinaries {
		src := filepath.Join(layout.ToolkitArtifacts, name)
		b, err := os.ReadFile(src)
		if err != nil {
			return fail(prog, fmt.Errorf("the image lacks %s: %w", src, err))
		}
		if err := layout.WriteFileAtomic(filepath.Join(dest, name), b, 0o755); err != nil {
			return fail(prog, fmt.Errorf("TOOLKIT_INSTALL_DIR=%s: %w", root, err))
		}
		fmt.Printf("nvidia-ctk-installer: installed %s\n", filepath.Join(dest, name))
	}
	fmt.Println("nvidia-ctk-installer: containerd's config left alone (RUNTIME_CONFIG ignored)")
	if noDaemon {
		return 0
	}
	// NVIDIA's installer stays up without NO_DAEMON, until the pod stops.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	return 0
}

// envBool reads a boolean variable as NVIDIA's installer does; unset is false.
func envBool(name string) (bool, error) {
	v, ok := os.LookupEnv(name)
	if !ok || v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errors.New(name + "=" + strconv.Quote(v) + " is not a boolean (true or false)")
	}
	return b, nil
}
