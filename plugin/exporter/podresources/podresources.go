// Package podresources attributes GPUs to pods: it asks the kubelet's pod-resources API (v1
// List) in the background and keeps an immutable device-id -> pods mapping that scrapes read
// for free, so a scrape never makes a gRPC call and a broken kubelet socket only removes the
// pod labels instead of failing the scrape.
package podresources

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// PodRef is one container holding a device.
type PodRef struct {
	Namespace string
	Pod       string
	Container string
}

// Mapping is one List result: device id (GPU UUID, MIG UUID or GPU index, with time-slicing
// "::n" replica suffixes removed) -> the containers holding it. It is never modified after
// publication.
type Mapping struct {
	Gen     uint64 // changes whenever the content changes, so consumers can cache by it
	Updated time.Time
	devices map[string][]PodRef
}

// Lookup returns the containers holding device id (sorted), or nil.
func (m *Mapping) Lookup(id string) []PodRef {
	if m == nil {
		return nil
	}
	return m.devices[id]
}

// Len is the number of attributed devices.
func (m *Mapping) Len() int {
	if m == nil {
		return 0
	}
	return len(m.devices)
}

// Config tunes a Client.
type Config struct {
	Socket  string        // kubelet pod-resources socket, e.g. /var/lib/kubelet/pod-resources/kubelet.sock
	Refresh time.Duration // time between List calls
	Timeout time.Duration // per List call; default 5s
	// MaxStale is how long the last good mapping is kept while List fails; after it the pod
	// labels are dropped rather than shown stale. Default 3*Refresh.
	MaxStale time.Duration
	Logger   *slog.Logger
}

// Stats counts the background List calls.
type Stats struct {
	Requests    uint64 // List calls started
	Successes   uint64
	Errors      uint64
	LastSuccess time.Time // zero until the first success
}

// Client refreshes the mapping in the background.
type Client struct {
	cfg    Config
	log    *slog.Logger
	conn   *grpc.ClientConn
	client podresourcesv1.PodResourcesListerClient

	cur         atomic.Pointer[Mapping]
	requests    atomic.Uint64
	successes   atomic.Uint64
	errors      atomic.Uint64
	lastSuccess atomic.Int64 // unix nanoseconds

	now func() time.Time // time.Now; a test's clock decides when the mapping is stale
}

// maxMessageSize matches the kubelet's own pod-resources client limit (16 MiB).
const maxMessageSize = 16 << 20

// New prepares a client; it does not connect until the first refresh, so a kubelet that starts
// after the exporter is picked up by a later refresh.
func New(cfg Config) (*Client, error) {
	if cfg.Socket == "" {
		return nil, fmt.Errorf("pod-resources socket path is empty")
	}
	if cfg.Refresh <= 0 {
		return nil, fmt.Errorf("pod-resources refresh interval must be > 0, got %s", cfg.Refresh)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.MaxStale <= 0 {
		cfg.MaxStale = 3 * cfg.Refresh
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	abs, err := filepath.Abs(cfg.Socket)
	if err != nil {
		return nil, fmt.Errorf("pod-resources socket %q: %w", cfg.Socket, err)
	}
	conn, err := grpc.NewClient("unix://"+abs,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageSize)))
	if err != nil {
		return nil, fmt.Errorf("pod-resources socket %q: %w", abs, err)
	}
	c := &Client{cfg: cfg, log: cfg.Logger, conn: conn, client: podresourcesv1.NewPodResourcesListerClient(conn), now: time.Now}
	c.cur.Store(&Mapping{})
	return c, nil
}

// Close releases the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Mapping returns the current mapping (never nil).
func (c *Client) Mapping() *Mapping { return c.cur.Load() }

// Stats returns the request counters.
func (c *Client) Stats() Stats {
	s := Stats{Requests: c.requests.Load(), Successes: c.successes.Load(), Errors: c.errors.Load()}
	if ns := c.lastSuccess.Load(); ns != 0 {
		s.LastSuccess = time.Unix(0, ns)
	}
	return s
}

// Run refreshes immediately and then every Refresh until ctx ends.
func (c *Client) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.Refresh)
	defer t.Stop()
	for {
		if err := c.Refresh(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("pod-resources List failed; GPU metrics carry no pod labels until it answers",
				"stage", "pod-resources", "socket", c.cfg.Socket, "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Refresh calls List once and publishes the new mapping. On failure the previous mapping is
// kept until it is older than MaxStale.
func (c *Client) Refresh(ctx context.Context) error {
	c.requests.Add(1)
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	resp, err := c.client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	now := c.now()
	prev := c.cur.Load()
	if err != nil {
		c.errors.Add(1)
		if prev.Len() > 0 && now.Sub(prev.Updated) > c.cfg.MaxStale {
			c.cur.Store(&Mapping{Gen: prev.Gen + 1, Updated: now})
		}
		return fmt.Errorf("list pod resources on %s: %w", c.cfg.Socket, err)
	}
	c.successes.Add(1)
	c.lastSuccess.Store(now.UnixNano())
	devices := index(resp)
	if maps.EqualFunc(devices, prev.devices, slices.Equal[[]PodRef]) {
		c.cur.Store(&Mapping{Gen: prev.Gen, Updated: now, devices: prev.devices})
		return nil
	}
	c.cur.Store(&Mapping{Gen: prev.Gen + 1, Updated: now, devices: devices})
	return nil
}

// index builds the device -> containers map. Every device id of every container counts, so
// any resource name (nvidia.com/gpu, nvidia.com/mig-1g.5gb, a pool's own name) is attributed.
func index(resp *podresourcesv1.ListPodResourcesResponse) map[string][]PodRef {
	devices := map[string][]PodRef{}
	for _, pod := range resp.GetPodResources() {
		for _, ctr := range pod.GetContainers() {
			ref := PodRef{Namespace: pod.GetNamespace(), Pod: pod.GetName(), Container: ctr.GetName()}
			add := func(key string) {
				if !slices.Contains(devices[key], ref) {
					devices[key] = append(devices[key], ref)
				}
			}
			for _, dev := range ctr.GetDevices() {
				for _, id := range dev.GetDeviceIds() {
					add(DeviceKey(id))
				}
			}
			for _, dr := range ctr.GetDynamicResources() {
				for _, cr := range dr.GetClaimResources() {
					for _, key := range claimKeys(cr) {
						add(key)
					}
				}
			}
		}
	}
	for _, refs := range devices {
		slices.SortFunc(refs, func(a, b PodRef) int {
			return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.Container, b.Container))
		})
	}
	return devices
}

// claimKeys are the device ids a DRA device of driver gpu.nvidia.com is looked up by: the GPU's
// index (gpu-<index>) or the MIG device's MIGKey (gpu-<index>-mig-<gi>-<ci>), and the UUID of a
// CDI device of the node's spec (nvidia.com/gpu=<uuid>) when the plugin passed one.
func claimKeys(cr *podresourcesv1.ClaimResource) []string {
	if cr.GetDriverName() != config.DRADriverName {
		return nil
	}
	var out []string
	if index, gi, _, mig, ok := config.ParseDRADeviceName(cr.GetDeviceName()); ok && mig {
		out = append(out, MIGKey(index, gi))
	} else if ok {
		out = append(out, strconv.Itoa(index))
	}
	for _, d := range cr.GetCdiDevices() {
		if uuid, ok := strings.CutPrefix(d.GetName(), config.CDIKind+"="); ok {
			out = append(out, uuid)
		}
	}
	return out
}

// MIGKey is the device id of a MIG device a DRA claim holds: its GPU's index and GPU instance.
func MIGKey(index, gi int) string { return fmt.Sprintf("%d/mig-%d", index, gi) }

// DeviceKey removes a time-slicing replica suffix ("GPU-abc::3" -> "GPU-abc").
func DeviceKey(id string) string {
	if i := strings.Index(id, "::"); i >= 0 {
		return id[:i]
	}
	return id
}
