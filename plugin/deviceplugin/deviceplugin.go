// Package deviceplugin runs the GPU device plugin: it reads the node's GPUs from NVML, serves
// one deviceplugin/v1beta1 socket per resource (package server), feeds device health into the
// ListAndWatch streams (package health), and registers with the kubelet whenever kubelet.sock
// appears — at start, after start, and after every kubelet restart.
//
// Data flows one way: NVML -> devices (what exists) -> server (what the kubelet sees), with
// health and topology on the side.
package deviceplugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/devices"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/health"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/server"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/topology"
)

// KubeletSocket is the kubelet's registration socket inside the plugin dir.
const KubeletSocket = "kubelet.sock"

// Options configure a Manager. Zero durations take the defaults.
type Options struct {
	Lib       nvml.Interface
	Config    config.DevicePlugin
	PluginDir string
	HostRoot  string
	Logger    *slog.Logger
	// MPS sharing: MPSHostRoot is the host's MPS root (the mounts handed to containers),
	// MPSDir where it is mounted here (the control daemon's record is read there).
	MPSHostRoot string
	MPSDir      string
	// MPSPoll is how often the control daemon's record is read while the plugin waits for it.
	MPSPoll time.Duration

	// Health tuning (the recovery period comes from Config).
	ProbeInterval time.Duration
	WaitTimeout   time.Duration
	// Registration retry: first delay, doubling up to RetryMax, at most RetryAttempts tries
	// per kubelet.sock appearance; the next appearance starts over.
	RetryInitial  time.Duration
	RetryMax      time.Duration
	RetryAttempts int
}

// Manager owns the plugins of one node.
type Manager struct {
	opts    Options
	log     *slog.Logger
	gpus    []devices.GPU
	plugins []*server.Plugin
	monitor *health.Monitor
}

// New enumerates the GPUs and builds one plugin per resource; nothing is served yet.
func New(opts Options) (*Manager, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.RetryInitial <= 0 {
		opts.RetryInitial = 10 * time.Millisecond
	}
	if opts.RetryMax <= 0 {
		opts.RetryMax = 5 * time.Second
	}
	if opts.RetryAttempts <= 0 {
		opts.RetryAttempts = 12
	}
	if err := config.ValidateDevicePlugin(opts.Config); err != nil {
		return nil, fmt.Errorf("device plugin config: %w", err)
	}
	recovery, _ := config.RecoveryPeriod(opts.Config)
	gpus, skipped, err := devices.Enumerate(opts.Lib, opts.HostRoot)
	if err != nil {
		return nil, err
	}
	for _, problem := range skipped {
		opts.Logger.Error("GPU problem at start", "error", problem)
	}
	resources, err := devices.Resources(gpus, opts.Config)
	if err != nil {
		return nil, fmt.Errorf("device plugin config: %w", err)
	}
	m := &Manager{opts: opts, log: opts.Logger, gpus: gpus}
	graph := topology.Build(gpus)
	var mps *server.MPS
	if opts.Config.Sharing.MPS != nil {
		mps = &server.MPS{HostRoot: cmp.Or(opts.MPSHostRoot, config.MPSHostRoot)}
		m.opts.MPSDir = cmp.Or(opts.MPSDir, config.MPSContainerRoot)
		m.opts.MPSPoll = cmp.Or(opts.MPSPoll, time.Second)
	}
	for _, res := range resources {
		m.plugins = append(m.plugins, server.New(res, server.Options{
			PluginDir: opts.PluginDir, DeviceListStrategy: opts.Config.DeviceListStrategy, Graph: graph, MPS: mps, Logger: opts.Logger,
		}))
	}
	if opts.Config.HealthChecks.Enabled {
		m.monitor = health.New(opts.Lib, gpus, health.Options{
			IgnoredXIDs: opts.Config.HealthChecks.IgnoredXIDs, RecoveryPeriod: recovery,
			ProbeInterval: opts.ProbeInterval, WaitTimeout: opts.WaitTimeout, Logger: opts.Logger,
		})
	}
	return m, nil
}

// Plugins are the per-resource plugins, sorted by resource name.
func (m *Manager) Plugins() []*server.Plugin { return m.plugins }

// Run serves until ctx ends, then stops every server and removes its socket. It returns an
// error only when it cannot start (plugin dir missing, socket not creatable); a kubelet that
// goes away or refuses registration is waited for, never a reason to exit.
func (m *Manager) Run(ctx context.Context) error {
	if st, err := os.Stat(m.opts.PluginDir); err != nil || !st.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		return fmt.Errorf("--plugin-dir %s: %w (mount the kubelet's device-plugins directory there)", m.opts.PluginDir, err)
	}
	if !m.waitForMPS(ctx) {
		return nil
	}
	w, err := newKubeletWatch(m.opts.PluginDir, m.plugins, m.log)
	if err != nil {
		return err
	}
	defer w.close()
	defer m.stopAll()
	for _, p := range m.plugins {
		if err := p.Start(); err != nil {
			return err
		}
	}
	// The health watch is in place, and devices bad at start are marked, before the kubelet can
	// hear of a device: nothing between start and registration goes unseen.
	if m.monitor != nil {
		m.monitor.Start(m.applyHealth)
	}
	m.log.Info("device plugin started", "gpus", len(m.gpus), "resources", len(m.plugins))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	if m.monitor != nil {
		wg.Go(func() { m.monitor.Run(ctx, m.applyHealth) })
	}
	wg.Go(func() { w.run(ctx) })
	wg.Go(func() { m.registerLoop(ctx, w.triggers) })
	<-ctx.Done()
	wg.Wait()
	m.log.Info("device plugin stopped")
	return nil
}

func (m *Manager) applyHealth(u health.Update) {
	for _, p := range m.plugins {
		p.SetHealth(u.UUID, u.Healthy, u.Reason)
	}
}

func (m *Manager) stopAll() {
	for _, p := range m.plugins {
		p.Stop()
	}
}

// waitForMPS holds the plugin back, under MPS sharing, until the node's control daemon records
// that it serves this config and its pipe is there: a replica handed out before would be a
// client with no server (k8s-device-plugin checks the daemon before serving, too). The agent
// opens this stage's gate only then, so the wait is short unless the daemon was restarted.
// false: ctx ended first.
func (m *Manager) waitForMPS(ctx context.Context) bool {
	if m.opts.Config.Sharing.MPS == nil {
		return true
	}
	t := time.NewTicker(m.opts.MPSPoll)
	defer t.Stop()
	var last string
	for {
		err := config.MPSServes(m.opts.MPSDir, m.opts.Config, os.ReadFile, os.Stat)
		if err == nil {
			m.log.Info("the MPS control daemon serves this config", "mpsDir", m.opts.MPSDir)
			return true
		}
		if err.Error() != last {
			m.log.Info("waiting for the MPS control daemon", "reason", err.Error())
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}
