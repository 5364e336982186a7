package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/e2e/internal/standin/layout"
)

// gpuUUIDs are the GPUs the stand-in reports, comma-separated: the UUIDs of the device
// plugin's --nvml-mock dgxa100, set at link time (-X main.gpuUUIDs=...) by package standin,
// since go-nvml's mock needs cgo and these programs are static.
var gpuUUIDs string

// ctkVersion is the toolkit release the stand-in claims to be.
const ctkVersion = "1.18.0"

const ctkUsage = `nvidia-ctk (gpupolicy e2e stand-in) ` + ctkVersion + `
usage:
  nvidia-ctk --version
  nvidia-ctk cdi generate [--output=FILE] [--format=yaml|json] [--device-name-strategy=uuid|index|type-index]
                          [--nvidia-cdi-hook-path=PATH | --nvidia-ctk-path=PATH] [--driver-root=DIR]
  nvidia-ctk hook SUBCOMMAND ...   (as nvidia-cdi-hook)
`

// ctk stands in for nvidia-ctk as gpupolicy's agent runs it: "cdi generate" writes a CDI
// spec with one device per mock GPU and an "all" device. Each device's edits set
// layout.CDIDeviceEnv, so a container shows which devices containerd resolved for it; the
// spec-wide edits run the CDI hook named by --nvidia-cdi-hook-path, as NVIDIA's specs do.
func ctk(args []string) int {
	const prog = "nvidia-ctk"
	switch {
	case len(args) == 1 && (args[0] == "--version" || args[0] == "-v" || args[0] == "version"):
		fmt.Printf("NVIDIA Container Toolkit CLI version %s (gpupolicy e2e stand-in)\n", ctkVersion)
		return 0
	case len(args) == 1 && (args[0] == "--help" || args[0] == "-h" || args[0] == "help"):
		fmt.Print(ctkUsage)
		return 0
	case len(args) >= 2 && args[0] == "cdi" && args[1] == "generate":
		if err := cdiGenerate(args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "%s (gpupolicy e2e stand-in): cdi generate: %v\n", prog, err)
			return 1
		}
		return 0
	case len(args) >= 1 && args[0] == "hook":
		return cdiHook(args[1:])
	}
	fmt.Fprintf(os.Stderr, "%s (gpupolicy e2e stand-in): unsupported command %q\n%s", prog, strings.Join(args, " "), ctkUsage)
	return 2
}

// CDI spec documents, as tags.cncf.io/container-device-interface/specs-go names them.
type cdiSpec struct {
	CDIVersion     string         `json:"cdiVersion"`
	Kind           string         `json:"kind"`
	Devices        []cdiDevice    `json:"devices"`
	ContainerEdits containerEdits `json:"containerEdits"`
}

type cdiDevice struct {
	Name           string         `json:"name"`
	ContainerEdits containerEdits `json:"containerEdits"`
}

type containerEdits struct {
	Env   []string   `json:"env,omitempty"`
	Hooks []specHook `json:"hooks,omitempty"`
}

type specHook struct {
	HookName string   `json:"hookName"`
	Path     string   `json:"path"`
	Args     []string `json:"args,omitempty"`
}

type generateFlags struct {
	output, format, strategy, hookPath, driverRoot string
}

func parseGenerate(args []string) (generateFlags, error) {
	f := generateFlags{strategy: "index", hookPath: "/usr/bin/nvidia-cdi-hook", driverRoot: "/"}
	targets := map[string]*string{
		"output": &f.output, "format": &f.format, "device-name-strategy": &f.strategy,
		"nvidia-cdi-hook-path": &f.hookPath, "nvidia-ctk-path": &f.hookPath, "driver-root": &f.driverRoot,
	}
	for i := 0; i < len(args); i++ {
		name, hasValue, isFlag := flagName(args[i])
		target, known := targets[name]
		if !isFlag || !known {
			return f, fmt.Errorf("flag or argument %q not supported by the stand-in (it supports what gpupolicy's agent passes: see --help)", args[i])
		}
		switch {
		case hasValue:
			*target = args[i][strings.Index(args[i], "=")+1:]
		case i+1 < len(args):
			i++
			*target = args[i]
		default:
			return f, fmt.Errorf("flag --%s needs a value", name)
		}
	}
	return f, nil
}

func cdiGenerate(args []string) error {
	f, err := parseGenerate(args)
	if err != nil {
		return err
	}
	if f.format == "" {
		f.format = "yaml"
		if filepath.Ext(f.output) == ".json" {
			f.format = "json"
		}
	}
	if f.format != "yaml" && f.format != "json" {
		return fmt.Errorf("--format=%q: want yaml or json", f.format)
	}
	if st, err := os.Stat(f.driverRoot); err != nil || !st.IsDir() {
		return fmt.Errorf("--driver-root=%s is not a directory: no driver to generate a spec for", f.driverRoot)
	}
	if !filepath.IsAbs(f.hookPath) {
		return fmt.Errorf("--nvidia-cdi-hook-path=%q: want an absolute host path", f.hookPath)
	}
	uuids := strings.Split(gpuUUIDs, ",")
	if gpuUUIDs == "" {
		return errors.New("no GPUs: this stand-in was built without -X main.gpuUUIDs (build it with package standin)")
	}
	spec := cdiSpec{CDIVersion: "0.6.0", Kind: "nvidia.com/gpu"}
	for i, uuid := range uuids {
		var name string
		switch f.strategy {
		case "uuid":
			name = uuid
		case "index":
			name = strconv.Itoa(i)
		case "type-index":
			name = "gpu" + strconv.Itoa(i)
		default:
			return fmt.Errorf("--device-name-strategy=%q: want uuid, index or type-index", f.strategy)
		}
		spec.Devices = append(spec.Devices, cdiDevice{Name: name, ContainerEdits: containerEdits{Env: []string{
			layout.CDIDeviceEnv + "=" + uuid,
			layout.CDIDeviceEnv + "_" + strconv.Itoa(i) + "=" + uuid,
		}}})
	}
	all := []string{layout.CDIDeviceEnv + "=" + gpuUUIDs}
	for i, uuid := range uuids {
		all = append(all, layout.CDIDeviceEnv+"_"+strconv.Itoa(i)+"="+uuid)
	}
	spec.Devices = append(spec.Devices, cdiDevice{Name: "all", ContainerEdits: containerEdits{Env: all}})
	// NVIDIA's hooks name the program first: nvidia-cdi-hook SUBCOMMAND, or nvidia-ctk hook
	// SUBCOMMAND for toolkits before 1.17 (--nvidia-ctk-path).
	hookArgs := []string{"nvidia-cdi-hook", "update-ldcache"}
	if filepath.Base(f.hookPath) == "nvidia-ctk" {
		hookArgs = []string{"nvidia-ctk", "hook", "update-ldcache"}
	}
	spec.ContainerEdits.Hooks = []specHook{{HookName: "createContainer", Path: f.hookPath, Args: hookArgs}}

	var b []byte
	if f.format == "json" {
		b, err = json.MarshalIndent(spec, "", "  ")
		b = append(b, '\n')
	} else {
		b, err = yaml.Marshal(spec)
	}
	if err != nil {
		return err
	}
	if f.output == "" {
		_, err = os.Stdout.Write(b)
		return err
	}
	// nvidia-ctk appends the format's extension to an output path that has none.
	if filepath.Ext(f.output) == "" {
		f.output += "." + f.format
	}
	if err := os.MkdirAll(filepath.Dir(f.output), 0o755); err != nil {
		return err
	}
	return layout.WriteFileAtomic(f.output, b, 0o644)
}
