// Package linkcheck guards a link-time rule of this module's test binaries. A binary that links
// Go's plugin package (kustomize's API pulls it in through Flux's SSA engine) is marked
// BIND_NOW by the Go linker, and go-nvml leaves its NVML symbols unresolved on purpose until
// libnvidia-ml.so.1 is opened: a test binary with both aborts at start-up with "undefined
// symbol: nvml..." on every machine without NVIDIA's library, before a single test runs and
// before `go vet` or the build can notice. Programs that need NVML run as separate processes
// (the agents of fakenode.Fleet, realnode's standinimages); this test fails naming the import
// chain when a package of the suite starts linking both.
package linkcheck

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const (
	goPlugin = "plugin"
	goNVML   = "github.com/NVIDIA/go-nvml/pkg/nvml"
)

type pkg struct {
	ImportPath                string
	Deps                      []string
	Imports                   []string
	TestGoFiles, XTestGoFiles []string
}

func TestNoTestBinaryLinksPluginAndNVML(t *testing.T) {
	// -test lists each package's test binary ("p.test") with the deps of its tests.
	cmd := exec.Command("go", "list", "-e", "-test", "-deps=false", "-json=ImportPath,Deps", "github.com/gpupolicy/gpupolicy/e2e/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	checked := 0
	var bad []string
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(p.ImportPath, ".test") {
			continue
		}
		checked++
		var plugin, nvml bool
		for _, d := range p.Deps {
			plugin = plugin || d == goPlugin
			nvml = nvml || d == goNVML
		}
		if plugin && nvml {
			bad = append(bad, p.ImportPath)
		}
	}
	t.Logf("%d test binaries checked", checked)
	if checked == 0 {
		t.Fatal("go list listed no test binaries: the check checked nothing")
	}
	for _, b := range bad {
		t.Errorf("%s links both Go's plugin package and go-nvml: it will not start without libnvidia-ml.so.1 (see `go mod why`/`go list -deps -test` for the chain; move the NVML code out of the imported package or run it as a process)", b)
	}
}
