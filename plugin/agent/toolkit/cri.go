package toolkit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gpupolicy/gpupolicy/plugin/agent/hostfs"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// DefaultContainerdSocket is containerd's gRPC (and CRI) socket on the host.
const DefaultContainerdSocket = "/run/containerd/containerd.sock"

// criView is what the running containerd says about itself through its CRI: the daemon's own
// view, not what a config file or `config dump` would give a fresh process.
type criView struct {
	// PID answers the call (SO_PEERCRED of the connection; 0 outside its PID namespace).
	PID     int
	Version string // RuntimeService.Version's runtime_version, e.g. "v2.1.9", "1.6.20~ds1"
	// Handlers are the runtime handlers by name: RuntimeService.Status's runtime_handlers
	// (containerd 2.x), else the runtimes of the verbose config.
	Handlers     []string
	FromHandlers bool // Handlers came from runtime_handlers
	// Runtimes are containerd.runtimes of the CRI config in the verbose info["config"] (all
	// versions), keys as containerd's JSON writes them.
	Runtimes     map[string]map[string]any
	Config       map[string]any // the whole verbose info["config"]
	RuntimeReady bool
	ReadyReason  string // RuntimeReady's reason and message when not ready
}

// criError is a CRI socket that cannot be reached or does not answer: the reason names the
// socket and the fix.
type criError struct {
	Socket string
	Err    error
}

func (e *criError) Error() string {
	if status.Code(e.Err) == codes.Unimplemented {
		return fmt.Sprintf("containerd at %s serves no CRI: %v (its CRI plugin failed to load or is disabled: see containerd's log and disabled_plugins)", e.Socket, e.Err)
	}
	return fmt.Sprintf("cannot reach containerd's CRI at %s: %v (containerd not running, or not listening there: set --containerd-socket to its grpc.address; the toolkit DaemonSet mounts the host's / at --host-root)", e.Socket, e.Err)
}

func (e *criError) Unwrap() error { return e.Err }

// socketPath is --containerd-socket resolved under the host root: the local path to dial.
func (in *Installer) socketPath() (host, local string, err error) {
	host = in.ContainerdSocket
	if host == "" {
		host = DefaultContainerdSocket
	}
	p, err := hostfs.Resolve(in.HostRoot, host)
	if err != nil {
		return host, "", &criError{Socket: host, Err: err}
	}
	local = p.Local()
	st, err := os.Stat(local)
	if errors.Is(err, fs.ErrNotExist) {
		return host, local, &criError{Socket: host, Err: fmt.Errorf("no such socket (looked at %s)", local)}
	} else if err != nil {
		return host, local, &criError{Socket: host, Err: err}
	}
	if len(local) > len(unix.RawSockaddrUnix{}.Path)-1 {
		return host, local, &criError{Socket: host, Err: fmt.Errorf("%s is longer than a unix socket address allows (%d bytes)", local, len(unix.RawSockaddrUnix{}.Path)-1)}
	}
	if st.Mode().Type() != os.ModeSocket {
		return host, local, &criError{Socket: host, Err: fmt.Errorf("%s is not a socket", local)}
	}
	return host, local, nil
}

// queryCRI asks the containerd listening at local for RuntimeService.Version and a verbose
// RuntimeService.Status, on one connection so the answer is from one process.
func queryCRI(ctx context.Context, socket, local string) (criView, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var view criView
	dial := func(ctx context.Context, _ string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "unix", local)
		if err != nil {
			return nil, err
		}
		view.PID = peerPID(c)
		return c, nil
	}
	conn, err := grpc.NewClient("passthrough:///containerd", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(dial))
	if err != nil {
		return view, &criError{Socket: socket, Err: err}
	}
	defer conn.Close()
	rs := runtimeapi.NewRuntimeServiceClient(conn)
	ver, err := rs.Version(ctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(false))
	if err != nil {
		return view, &criError{Socket: socket, Err: err}
	}
	view.Version = ver.RuntimeVersion
	st, err := rs.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		return view, &criError{Socket: socket, Err: err}
	}
	view.RuntimeReady, view.ReadyReason = runtimeReady(st.GetStatus())
	for _, h := range st.RuntimeHandlers {
		if h.Name != "" { // "" is the default handler, listed under its own name too
			view.Handlers = append(view.Handlers, h.Name)
		}
	}
	view.FromHandlers = len(view.Handlers) > 0
	raw, ok := st.Info["config"]
	if !ok {
		return view, &criError{Socket: socket, Err: errors.New("verbose RuntimeService.Status has no info[\"config\"]")}
	}
	if err := json.Unmarshal([]byte(raw), &view.Config); err != nil {
		return view, &criError{Socket: socket, Err: fmt.Errorf("verbose RuntimeService.Status info[\"config\"]: %w", err)}
	}
	view.Runtimes = map[string]map[string]any{}
	ctd, _ := view.Config["containerd"].(map[string]any)
	runtimes, _ := ctd["runtimes"].(map[string]any)
	for name, r := range runtimes {
		if m, ok := r.(map[string]any); ok {
			view.Runtimes[name] = m
		}
	}
	if !view.FromHandlers {
		view.Handlers = sortedKeys(view.Runtimes)
	}
	return view, nil
}

func runtimeReady(st *runtimeapi.RuntimeStatus) (bool, string) {
	for _, c := range st.GetConditions() {
		if c.Type == runtimeapi.RuntimeReady {
			if c.Status {
				return true, ""
			}
			return false, strings.TrimSpace(c.Reason + " " + c.Message)
		}
	}
	return false, "no RuntimeReady condition"
}

// peerPID is the PID of the process that listens on the socket c is connected to.
func peerPID(c net.Conn) int {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0
	}
	pid := 0
	_ = raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}

func sortedKeys[V any](m map[string]V) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.Sort(keys)
	return keys
}

// notInEffect compares the running daemon's CRI config with every setting the rendered
// drop-in makes in the CRI runtime plugin (the handler's runtime_type and options, the
// default runtime, CDI): "" when all are in effect, else the first difference. containerd's
// JSON names a TOML key in camel case (runtime_type: runtimeType, pod_annotations:
// PodAnnotations) and keeps option keys as written (BinaryName), so keys are compared with
// case and underscores ignored.
func notInEffect(view criView, rendered table, v Version) string {
	plugin := config.CRIRuntimePlugin(v.ConfigVersion())
	want, _ := subTable(rendered, "plugins")[plugin].(table)
	for _, h := range runtimesIn(rendered) {
		if _, ok := view.Runtimes[h]; !ok || !slices.Contains(view.Handlers, h) {
			return fmt.Sprintf("the running containerd has no runtime handler %q (its CRI lists: %s)", h, strings.Join(view.Handlers, ", "))
		}
	}
	return differs("plugins."+strconv.Quote(plugin), want, view.Config)
}

// differs says where have lacks or contradicts a value of want ("" when it has them all).
func differs(at string, want any, have any) string {
	switch w := want.(type) {
	case table:
		h, ok := have.(map[string]any)
		if !ok {
			return fmt.Sprintf("the running containerd has %s = %s, the drop-in sets a table", at, jsonText(have))
		}
		for _, k := range sortedKeys(w) {
			hv, found := lookupFold(h, k)
			if !found {
				return fmt.Sprintf("the running containerd has no %s.%s (the drop-in sets %s)", at, k, jsonText(w[k]))
			}
			if d := differs(at+"."+k, w[k], hv); d != "" {
				return d
			}
		}
		return ""
	case []any:
		h, ok := have.([]any)
		if ok && len(h) == len(w) {
			for i := range w {
				if differs(at, w[i], h[i]) != "" {
					ok = false
				}
			}
		}
		if !ok || len(h) != len(w) {
			return fmt.Sprintf("the running containerd has %s = %s, the drop-in sets %s", at, jsonText(have), jsonText(want))
		}
		return ""
	case int64:
		if f, ok := have.(float64); ok && f == float64(w) {
			return ""
		}
	default:
		if fmt.Sprint(want) == fmt.Sprint(have) {
			return ""
		}
	}
	return fmt.Sprintf("the running containerd has %s = %s, the drop-in sets %s", at, jsonText(have), jsonText(want))
}

// lookupFold finds key k in m ignoring case and underscores.
func lookupFold(m map[string]any, k string) (any, bool) {
	if v, ok := m[k]; ok {
		return v, true
	}
	fold := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }
	for _, hk := range sortedKeys(m) {
		if fold(hk) == fold(k) {
			return m[hk], true
		}
	}
	return nil, false
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
