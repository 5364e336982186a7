//go:build gfdharness

// Command gfd-labels runs gpu-feature-discovery's labelers, from k8s-device-plugin's own
// internal/lm, over gpupolicy's NVML mock and prints the labels as JSON: the peer of the agent's
// labels in the differential test (plugin/agent/cli/gfd_test.go). It is not part of this module:
// build.sh copies it into a copy of github.com/NVIDIA/k8s-device-plugin (the only place its
// internal packages may be imported from) and builds it there with -tags gfdharness.
//
// The wiring is GFD's main (cmd/gpu-feature-discovery, v0.17.4) with two changes: NVML is the
// mock instead of libnvidia-ml.so.1, and the labels go to stdout once instead of to a file in a
// loop. GFD's flags, config loading (spec.NewConfig, DisableResourceNamingInConfig), resource
// manager, vGPU library (reading /sys/bus/pci/devices) and labelers are NVIDIA's, unchanged.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	nvinfo "github.com/NVIDIA/go-nvlib/pkg/nvlib/info"
	"github.com/urfave/cli/v2"

	spec "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
	"github.com/NVIDIA/k8s-device-plugin/internal/lm"
	"github.com/NVIDIA/k8s-device-plugin/internal/logger"
	"github.com/NVIDIA/k8s-device-plugin/internal/resource"
	"github.com/NVIDIA/k8s-device-plugin/internal/vgpu"

	"github.com/gpupolicy/gpupolicy/plugin/gpulib"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

func main() {
	var mock, driver, cuda string
	// GFD's own flags (those that change labels), with GFD's names, defaults and variables.
	flags := []cli.Flag{
		&cli.StringFlag{Name: "mig-strategy", Value: spec.MigStrategyNone, EnvVars: []string{"GFD_MIG_STRATEGY", "MIG_STRATEGY"}},
		&cli.BoolFlag{Name: "fail-on-init-error", Value: true, EnvVars: []string{"GFD_FAIL_ON_INIT_ERROR", "FAIL_ON_INIT_ERROR"}},
		&cli.BoolFlag{Name: "oneshot", Value: true, EnvVars: []string{"GFD_ONESHOT"}},
		&cli.BoolFlag{Name: "no-timestamp", Value: true, EnvVars: []string{"GFD_NO_TIMESTAMP"}},
		&cli.StringFlag{Name: "output-file", Aliases: []string{"output", "o"}, Value: "", EnvVars: []string{"GFD_OUTPUT_FILE"}},
		&cli.StringFlag{Name: "machine-type-file", Value: "/sys/class/dmi/id/product_name", EnvVars: []string{"GFD_MACHINE_TYPE_FILE"}},
		&cli.StringFlag{Name: "config-file", EnvVars: []string{"GFD_CONFIG_FILE", "CONFIG_FILE"}},
		&cli.StringFlag{Name: "device-discovery-strategy", Value: "nvml", EnvVars: []string{"DEVICE_DISCOVERY_STRATEGY"}},
		&cli.StringFlag{Name: "driver-root-ctr-path", Aliases: []string{"container-driver-root"}, Value: spec.DefaultContainerDriverRoot},
	}
	harness := []cli.Flag{
		&cli.StringFlag{Name: "nvml-mock", Value: "dgxa100", Destination: &mock},
		&cli.StringFlag{Name: "mock-driver-version", Destination: &driver},
		&cli.StringFlag{Name: "mock-cuda-version", Destination: &cuda},
	}
	app := cli.NewApp()
	app.Name = "gfd-labels"
	app.Flags = append(flags, harness...)
	app.Action = func(c *cli.Context) error {
		config, err := spec.NewConfig(c, flags)
		if err != nil {
			return fmt.Errorf("unable to finalize config: %v", err)
		}
		spec.DisableResourceNamingInConfig(logger.ToKlog, config)

		var cv int
		if cuda != "" {
			if cv, err = gpulib.ParseCUDAVersion(cuda); err != nil {
				return err
			}
		}
		nvmllib, err := gpumock.New(mock, gpumock.WithDriverVersion(driver), gpumock.WithCUDADriverVersion(cv))
		if err != nil {
			return err
		}
		devicelib := device.New(nvmllib)
		infolib := nvinfo.New(nvinfo.WithNvmlLib(nvmllib), nvinfo.WithDeviceLib(devicelib))
		manager, err := resource.NewManager(infolib, nvmllib, devicelib, config)
		if err != nil {
			return fmt.Errorf("failed to create resource manager: %w", err)
		}
		labelers, err := lm.NewLabelers(manager, vgpu.NewVGPULib(vgpu.NewNvidiaPCILib()), config)
		if err != nil {
			return err
		}
		labels, err := labelers.Labels()
		if err != nil {
			return fmt.Errorf("error generating labels: %v", err)
		}
		return json.NewEncoder(os.Stdout).Encode(labels)
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "gfd-labels:", strings.TrimSpace(err.Error()))
		os.Exit(1)
	}
}
