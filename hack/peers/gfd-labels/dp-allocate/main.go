//go:build gfdharness

// Command dp-allocate runs k8s-device-plugin v0.17.4's own device plugin servers
// (internal/plugin, through plugin.New as its main's GetPlugins does) over gpupolicy's NVML
// mock, lists each resource's devices and answers Allocate requests, printing JSON: the peer
// of the device plugin's differential test (plugin/deviceplugin/nvidia_test.go). build.sh
// (beside gfd-labels) copies it into the copy of NVIDIA's module and builds it there.
//
// The wiring is the plugin's main with three changes: NVML is the mock, the CDI handler is
// NVIDIA's null one (the test compares the envvar strategy; NVIDIA's CDI vendor name is its
// own), and instead of serving sockets and registering, each plugin's Allocate is called with
// the requests given as arguments ("id,id" per container, ";" between containers of one
// request). Config loading (spec.NewConfig, DisableResourceNamingInConfig, validateFlags'
// checks, rm.AddDefaultResourcesToConfig) is NVIDIA's.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	nvinfo "github.com/NVIDIA/go-nvlib/pkg/nvlib/info"
	"github.com/urfave/cli/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	spec "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
	"github.com/NVIDIA/k8s-device-plugin/internal/logger"
	"github.com/NVIDIA/k8s-device-plugin/internal/plugin"
	"github.com/NVIDIA/k8s-device-plugin/internal/rm"

	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

// resource is one plugin's devices and its answer to each Allocate request.
type resource struct {
	Devices []string `json:"devices"`
	Results []result `json:"results"`
}

type result struct {
	Responses []*pluginapi.ContainerAllocateResponse `json:"responses,omitempty"`
	Error     string                                 `json:"error,omitempty"`
}

func main() {
	var mock string
	// The plugin's own flags that change what it advertises and answers, with its names,
	// defaults and variables.
	flags := []cli.Flag{
		&cli.StringFlag{Name: "mig-strategy", Value: spec.MigStrategyNone, EnvVars: []string{"MIG_STRATEGY"}},
		&cli.BoolFlag{Name: "fail-on-init-error", Value: true, EnvVars: []string{"FAIL_ON_INIT_ERROR"}},
		&cli.StringFlag{Name: "driver-root", Aliases: []string{"nvidia-driver-root"}, Value: "/", EnvVars: []string{"NVIDIA_DRIVER_ROOT"}},
		&cli.BoolFlag{Name: "pass-device-specs", Value: false, EnvVars: []string{"PASS_DEVICE_SPECS"}},
		&cli.StringSliceFlag{Name: "device-list-strategy", Value: cli.NewStringSlice(string(spec.DeviceListStrategyEnvVar)), EnvVars: []string{"DEVICE_LIST_STRATEGY"}},
		&cli.StringFlag{Name: "device-id-strategy", Value: spec.DeviceIDStrategyUUID, EnvVars: []string{"DEVICE_ID_STRATEGY"}},
		&cli.BoolFlag{Name: "gds-enabled", EnvVars: []string{"GDS_ENABLED"}},
		&cli.BoolFlag{Name: "mofed-enabled", EnvVars: []string{"MOFED_ENABLED"}},
		&cli.StringFlag{Name: "config-file", EnvVars: []string{"CONFIG_FILE"}},
		&cli.StringFlag{Name: "cdi-annotation-prefix", Value: spec.DefaultCDIAnnotationPrefix, EnvVars: []string{"CDI_ANNOTATION_PREFIX"}},
		&cli.StringFlag{Name: "nvidia-cdi-hook-path", Value: spec.DefaultNvidiaCTKPath, EnvVars: []string{"NVIDIA_CDI_HOOK_PATH"}},
		&cli.StringFlag{Name: "driver-root-ctr-path", Value: spec.DefaultContainerDriverRoot, EnvVars: []string{"DRIVER_ROOT_CTR_PATH"}},
		&cli.StringFlag{Name: "mps-root", EnvVars: []string{"MPS_ROOT"}},
		&cli.StringFlag{Name: "device-discovery-strategy", Value: "nvml", EnvVars: []string{"DEVICE_DISCOVERY_STRATEGY"}},
		&cli.IntSliceFlag{Name: "imex-channel-ids", EnvVars: []string{"IMEX_CHANNEL_IDS"}},
		&cli.BoolFlag{Name: "imex-required", EnvVars: []string{"IMEX_REQUIRED"}},
	}
	app := cli.NewApp()
	app.Name = "dp-allocate"
	app.Flags = append(flags, &cli.StringFlag{Name: "nvml-mock", Value: "dgxa100", Destination: &mock})
	app.Action = func(c *cli.Context) error {
		config, err := spec.NewConfig(c, flags)
		if err != nil {
			return fmt.Errorf("unable to finalize config: %v", err)
		}
		config.Flags.GFD = nil
		spec.DisableResourceNamingInConfig(logger.ToKlog, config)
		// validateFlags' MPS checks (the rest concern flags the test does not vary).
		if config.Sharing.SharingStrategy() == spec.SharingStrategyMPS {
			if *config.Flags.MigStrategy == spec.MigStrategyMixed {
				return errors.New("using --mig-strategy=mixed is not supported with MPS")
			}
			if config.Flags.MpsRoot == nil || *config.Flags.MpsRoot == "" {
				return errors.New("using MPS requires --mps-root to be specified")
			}
		}
		nvmllib, err := gpumock.New(mock)
		if err != nil {
			return err
		}
		devicelib := device.New(nvmllib)
		infolib := nvinfo.New(nvinfo.WithNvmlLib(nvmllib), nvinfo.WithDeviceLib(devicelib))
		if err := rm.AddDefaultResourcesToConfig(infolib, nvmllib, devicelib, config); err != nil {
			return err
		}
		strategies, err := spec.NewDeviceListStrategies(*config.Flags.Plugin.DeviceListStrategy)
		if err != nil {
			return err
		}
		plugins, err := plugin.New(infolib, nvmllib, devicelib,
			plugin.WithConfig(config), plugin.WithDeviceListStrategies(strategies),
			plugin.WithFailOnInitError(*config.Flags.FailOnInitError))
		if err != nil {
			return err
		}
		// plugin.New made one plugin per resource manager, in this order; the managers name
		// the resources (the plugins keep them unexported).
		nvmllib.Init()
		managers, err := rm.NewNVMLResourceManagers(infolib, nvmllib, devicelib, config)
		if err != nil {
			return err
		}
		if len(managers) != len(plugins) {
			return fmt.Errorf("%d resource managers for %d plugins", len(managers), len(plugins))
		}
		out := map[string]*resource{}
		for i, p := range plugins {
			srv, ok := p.(pluginapi.DevicePluginServer)
			if !ok {
				return fmt.Errorf("plugin %T does not serve deviceplugin/v1beta1", p)
			}
			r := &resource{}
			for id := range p.Devices() {
				r.Devices = append(r.Devices, id)
			}
			slices.Sort(r.Devices)
			out[string(managers[i].Resource())] = r
			for _, arg := range c.Args().Slice() {
				req := &pluginapi.AllocateRequest{}
				for _, ctr := range strings.Split(arg, ";") {
					req.ContainerRequests = append(req.ContainerRequests, &pluginapi.ContainerAllocateRequest{DevicesIDs: strings.Split(ctr, ",")})
				}
				resp, err := srv.Allocate(context.Background(), req)
				if err != nil {
					r.Results = append(r.Results, result{Error: err.Error()})
					continue
				}
				r.Results = append(r.Results, result{Responses: resp.ContainerResponses})
			}
		}
		return json.NewEncoder(os.Stdout).Encode(out)
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "dp-allocate:", strings.TrimSpace(err.Error()))
		os.Exit(1)
	}
}
