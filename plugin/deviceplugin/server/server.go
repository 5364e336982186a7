// Package server serves one extended resource to the kubelet over deviceplugin/v1beta1: its
// own unix socket under the plugin dir, ListAndWatch that re-sends the device list whenever a
// device's health changes, Allocate in CDI or env-var form, and topology-aware
// GetPreferredAllocation.
package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/devices"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/topology"
)

// Options configure a Plugin.
type Options struct {
	PluginDir          string
	DeviceListStrategy string
	// Graph scores GPU pairs for GetPreferredAllocation of whole GPUs; nil means no topology.
	Graph *topology.Graph
	// MPS: the resource's replicas are MPS clients of the node's control daemon; nil: none.
	MPS    *MPS
	Logger *slog.Logger
}

// MPS is what a container given an MPS replica needs, as k8s-device-plugin v0.17.4 hands it
// out: CUDA_MPS_PIPE_DIRECTORY, the daemon's pipe directory and its /dev/shm.
type MPS struct {
	// HostRoot is the MPS root on the host (config.MPSHostRoot), where the daemon keeps them.
	HostRoot string
}

// Plugin serves one resource.
type Plugin struct {
	// grpc-go requires the embed for forward compatibility; every RPC of v1beta1 is
	// implemented below (server.go, allocate.go).
	pluginapi.UnimplementedDevicePluginServer

	res    devices.Resource
	opts   Options
	socket string
	log    *slog.Logger
	byID   map[string]devices.Device
	pos    map[string]int // device id -> position in res.Devices
	// replicated is true when ids carry replica numbers ("<uuid>::<n>").
	replicated bool

	mu        sync.Mutex
	unhealthy map[string]string // UUID -> reason
	changed   chan struct{}     // closed and replaced on every health change
	srv       *grpc.Server
}

// SocketName is the file name of a resource's socket: "gpupolicy-nvidia.com-gpu.sock".
func SocketName(resource string) string { return config.SocketName(resource) }

// New returns a plugin for res; Start serves it.
func New(res devices.Resource, opts Options) *Plugin {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	p := &Plugin{res: res, opts: opts, socket: filepath.Join(opts.PluginDir, SocketName(res.Name)),
		log: opts.Logger.With("resource", res.Name), byID: map[string]devices.Device{}, pos: map[string]int{},
		unhealthy: map[string]string{}, changed: make(chan struct{})}
	for k, d := range res.Devices {
		p.byID[d.ID] = d
		p.pos[d.ID] = k
		if d.ID != d.UUID {
			p.replicated = true
		}
	}
	return p
}

// Resource is the resource name served.
func (p *Plugin) Resource() string { return p.res.Name }

// Devices are the device ids served, in ListAndWatch's order.
func (p *Plugin) Devices() []devices.Device { return p.res.Devices }

// Socket is the path of the plugin's socket.
func (p *Plugin) Socket() string { return p.socket }

// Start listens on the plugin's socket (replacing a stale file) and serves in the background.
func (p *Plugin) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv != nil {
		return nil
	}
	if err := os.Remove(p.socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", p.socket, err)
	}
	lis, err := net.Listen("unix", p.socket)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (is the plugin dir mounted read-write?)", p.socket, err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	p.srv = srv
	go func() {
		if err := srv.Serve(lis); err != nil {
			p.log.Error("device plugin server stopped", "socket", p.socket, "error", err)
		}
	}()
	p.log.Info("serving", "socket", p.socket, "devices", len(p.res.Devices))
	return nil
}

// Stop ends the server (open ListAndWatch streams end with it) and removes the socket.
func (p *Plugin) Stop() {
	p.mu.Lock()
	srv := p.srv
	p.srv = nil
	p.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Stop()
	if err := os.Remove(p.socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		p.log.Warn("remove socket", "socket", p.socket, "error", err)
	}
}

// Serving reports whether the server runs and its socket file is still there; the kubelet
// deletes every plugin socket when it restarts.
func (p *Plugin) Serving() bool {
	p.mu.Lock()
	running := p.srv != nil
	p.mu.Unlock()
	_, err := os.Stat(p.socket)
	return running && err == nil
}

// Register announces the plugin to the kubelet's Registration service at kubeletSocket.
func (p *Plugin) Register(ctx context.Context, kubeletSocket string) error {
	conn, err := grpc.NewClient("unix://"+kubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial kubelet %s: %w", kubeletSocket, err)
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(p.socket),
		ResourceName: p.res.Name,
		Options:      p.options(),
	})
	if err != nil {
		return fmt.Errorf("register %s with kubelet %s: %w", p.res.Name, kubeletSocket, err)
	}
	return nil
}

func (p *Plugin) options() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}
}

// SetHealth records the health of the device with uuid; it reports whether this resource has
// such a device. Open ListAndWatch streams get the new list at once.
func (p *Plugin) SetHealth(uuid string, healthy bool, reason string) bool {
	known := false
	for _, d := range p.res.Devices {
		if d.UUID == uuid {
			known = true
			break
		}
	}
	if !known {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, wasBad := p.unhealthy[uuid]
	if healthy == !wasBad {
		return true
	}
	if healthy {
		delete(p.unhealthy, uuid)
	} else {
		p.unhealthy[uuid] = reason
	}
	close(p.changed)
	p.changed = make(chan struct{})
	return true
}

// snapshot returns the device list as the kubelet sees it and the channel closed on the next
// health change.
func (p *Plugin) snapshot() ([]*pluginapi.Device, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := make([]*pluginapi.Device, 0, len(p.res.Devices))
	for _, d := range p.res.Devices {
		dev := &pluginapi.Device{ID: d.ID, Health: pluginapi.Healthy}
		if _, bad := p.unhealthy[d.UUID]; bad {
			dev.Health = pluginapi.Unhealthy
		}
		if d.NUMA >= 0 {
			dev.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(d.NUMA)}}}
		}
		list = append(list, dev)
	}
	return list, p.changed
}

func (p *Plugin) healthy(uuid string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, bad := p.unhealthy[uuid]
	return !bad
}

// GetDevicePluginOptions tells the kubelet to ask for preferred allocations.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return p.options(), nil
}

// ListAndWatch sends the full device list now and again after every health change.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		list, changed := p.snapshot()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: list}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		}
	}
}

// PreStartContainer has nothing to do: the runtime sets devices up from the CDI spec.
func (p *Plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
