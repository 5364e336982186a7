// Command standinimages builds the stand-in images of e2e/internal/standin for a real node and
// prints, as JSON, their archives and the NVML mock's GPU UUIDs.
//
// It is a separate program because package standin links go-nvml (for the mock's UUIDs), and a
// test binary that also links kustomize's API (through Flux's SSA engine, which imports Go's
// plugin package) is marked BIND_NOW by the Go linker: go-nvml's NVML symbols, left unresolved
// on purpose and loaded with dlopen, then abort the binary at start-up.
//
//	go run ./internal/realnode/standinimages -o DIR -toolkit REF
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/gpupolicy/gpupolicy/e2e/internal/standin"
)

// Output is what the program prints.
type Output struct {
	Images   []standin.Built `json:"images"`
	MockGPUs []string        `json:"mockGPUs"`
	Workload string          `json:"workload"`
}

func main() {
	out := flag.String("o", "", "directory for the archives (required)")
	toolkit := flag.String("toolkit", standin.DefaultToolkitRef, "ref of the toolkit installer stand-in (the rendered toolkit-copy image)")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "standinimages: -o DIR is required")
		os.Exit(2)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "standinimages:", err)
		os.Exit(1)
	}
	built, err := standin.BuildAll(context.Background(), *out, *toolkit)
	if err != nil {
		fmt.Fprintln(os.Stderr, "standinimages:", err)
		os.Exit(1)
	}
	gpus, err := standin.MockGPUs()
	if err != nil {
		fmt.Fprintln(os.Stderr, "standinimages:", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(Output{Images: built, MockGPUs: gpus, Workload: standin.DefaultWorkloadRef}); err != nil {
		os.Exit(1)
	}
}
