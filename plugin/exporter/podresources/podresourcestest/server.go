// Package podresourcestest runs a real kubelet pod-resources v1 gRPC server on a unix socket
// for tests: it answers List with the pods a test sets and counts the calls.
package podresourcestest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Container is one container and the device ids it holds of one resource.
type Container struct {
	Name      string
	Resource  string
	DeviceIDs []string
	// Claims are the container's DRA devices, as the kubelet lists a claim's prepared devices.
	Claims []ClaimDevice
}

// ClaimDevice is one device of a ResourceClaim a container uses (pod-resources DynamicResources).
type ClaimDevice struct {
	Namespace, Claim     string
	Driver, Pool, Device string
	CDIDevices           []string
}

// Pod is one pod in the List answer.
type Pod struct {
	Namespace, Name string
	Containers      []Container
}

// Server is a pod-resources server on Socket.
type Server struct {
	// grpc-go requires the embed. The test kubelet serves List, the only call the exporter
	// makes; Get and GetAllocatableResources answer Unimplemented, as an old kubelet would.
	podresourcesv1.UnimplementedPodResourcesListerServer
	Socket string
	mu     sync.Mutex
	pods   []Pod
	calls  atomic.Int64
	srv    *grpc.Server
}

// Start serves on a socket in a temp dir until the test ends.
func Start(t testing.TB, pods ...Pod) *Server {
	t.Helper()
	// Unix socket paths are limited to ~108 bytes; t.TempDir() can be longer.
	dir, err := os.MkdirTemp("", "podres")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Socket: filepath.Join(dir, "kubelet.sock"), pods: pods}
	if err := s.serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Stop()
		_ = os.RemoveAll(dir)
	})
	return s
}

func (s *Server) serve() error {
	_ = os.Remove(s.Socket) // a stale socket from a stopped server, as a restarted kubelet finds
	ln, err := net.Listen("unix", s.Socket)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, s)
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
	return nil
}

// Restart serves again on the same socket after Stop, as a restarted kubelet does.
func (s *Server) Restart() error { return s.serve() }

// SetPods replaces the pods List answers with.
func (s *Server) SetPods(pods ...Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods = pods
}

// Calls is how many List calls the server answered.
func (s *Server) Calls() int64 { return s.calls.Load() }

// Stop stops serving, as when the kubelet goes away.
func (s *Server) Stop() {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	srv.Stop()
}

// List implements the pod-resources API.
func (s *Server) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	s.calls.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for _, p := range s.pods {
		pr := &podresourcesv1.PodResources{Namespace: p.Namespace, Name: p.Name}
		for _, c := range p.Containers {
			cr := &podresourcesv1.ContainerResources{Name: c.Name}
			if c.Resource != "" {
				cr.Devices = []*podresourcesv1.ContainerDevices{{ResourceName: c.Resource, DeviceIds: c.DeviceIDs}}
			}
			for _, d := range c.Claims {
				res := &podresourcesv1.ClaimResource{DriverName: d.Driver, PoolName: d.Pool, DeviceName: d.Device}
				for _, id := range d.CDIDevices {
					res.CdiDevices = append(res.CdiDevices, &podresourcesv1.CDIDevice{Name: id})
				}
				cr.DynamicResources = append(cr.DynamicResources, &podresourcesv1.DynamicResource{
					ClaimName: d.Claim, ClaimNamespace: d.Namespace, ClaimResources: []*podresourcesv1.ClaimResource{res}})
			}
			pr.Containers = append(pr.Containers, cr)
		}
		resp.PodResources = append(resp.PodResources, pr)
	}
	return resp, nil
}
