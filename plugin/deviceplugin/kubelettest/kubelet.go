// Package kubelettest is the kubelet's side of deviceplugin/v1beta1 for tests and benchmarks:
// a real gRPC Registration server on <dir>/kubelet.sock that records every registration, and
// a real gRPC client for a plugin's socket.
package kubelettest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Kubelet serves Registration on Dir/kubelet.sock.
type Kubelet struct {
	Dir string
	// Registrations receives every RegisterRequest (buffered; a test that ignores it stalls
	// registration after 1024).
	Registrations chan Registration
	srv           *grpc.Server
	generation    atomic.Int64
}

// Registration is one RegisterRequest and the generation of kubelet.sock that received it
// (1 for the first socket, +1 per Restart).
type Registration struct {
	*pluginapi.RegisterRequest
	Generation int64
}

// Start creates kubelet.sock in dir and serves on it.
func Start(dir string) (*Kubelet, error) {
	k := &Kubelet{Dir: dir, Registrations: make(chan Registration, 1024)}
	if err := k.listen(); err != nil {
		return nil, err
	}
	return k, nil
}

func (k *Kubelet) listen() error {
	lis, err := net.Listen("unix", filepath.Join(k.Dir, "kubelet.sock"))
	if err != nil {
		return fmt.Errorf("test kubelet: %w", err)
	}
	gen := k.generation.Add(1)
	k.srv = grpc.NewServer()
	pluginapi.RegisterRegistrationServer(k.srv, &generation{k: k, gen: gen})
	go func() { _ = k.srv.Serve(lis) }()
	return nil
}

// Generation is the number of the current kubelet.sock.
func (k *Kubelet) Generation() int64 { return k.generation.Load() }

// generation serves Registration for one kubelet.sock.
type generation struct {
	// grpc-go requires the embed; Registration has one RPC, Register, implemented below.
	pluginapi.UnimplementedRegistrationServer
	k   *Kubelet
	gen int64
}

// Register records the request; like the kubelet it rejects an unsupported version.
func (g *generation) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if req.Version != pluginapi.Version {
		return nil, fmt.Errorf("unsupported version %q", req.Version)
	}
	g.k.Registrations <- Registration{RegisterRequest: req, Generation: g.gen}
	return &pluginapi.Empty{}, nil
}

// Stop stops serving; closing the listener removes kubelet.sock.
func (k *Kubelet) Stop() {
	k.srv.Stop()
	_ = os.Remove(filepath.Join(k.Dir, "kubelet.sock"))
}

// Restart plays a kubelet restart: kubelet.sock goes away, the kubelet wipes the other
// sockets in the dir (as the real one does on start) when wipe is set, and kubelet.sock is
// created again.
func (k *Kubelet) Restart(wipe bool) error {
	k.Stop()
	if wipe {
		entries, err := os.ReadDir(k.Dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".sock") {
				_ = os.Remove(filepath.Join(k.Dir, e.Name()))
			}
		}
	}
	return k.listen()
}

// Dial connects to a plugin's socket (endpoint: its file name in Dir, as registered).
func (k *Kubelet) Dial(endpoint string) (pluginapi.DevicePluginClient, func() error, error) {
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.Dir, endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	return pluginapi.NewDevicePluginClient(conn), conn.Close, nil
}
