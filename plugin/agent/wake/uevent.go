package wake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Uevent is one kernel uevent: what happened (add, remove, change, bind, ...) to which kernel
// object (DEVPATH, e.g. /module/nvidia) of which subsystem.
type Uevent struct {
	Action, DevPath, Subsystem string
}

// parseUevent reads the kernel's format: "ACTION@DEVPATH", then NUL-separated KEY=VALUE
// lines. Messages in udev's own format (a "libudev" header) are not the kernel's and are
// ignored.
func parseUevent(b []byte) (Uevent, bool) {
	fields := bytes.Split(b, []byte{0})
	head := string(fields[0])
	at := strings.IndexByte(head, '@')
	if at <= 0 {
		return Uevent{}, false
	}
	ev := Uevent{Action: head[:at], DevPath: head[at+1:]}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(string(f), "=")
		if !ok {
			continue
		}
		switch k {
		case "ACTION":
			ev.Action = v
		case "DEVPATH":
			ev.DevPath = v
		case "SUBSYSTEM":
			ev.Subsystem = v
		}
	}
	return ev, true
}

// Module matches a kernel module with a name starting with prefix being loaded or unloaded.
// The kernel announces a module (add@/module/NAME) once its init has run, so the files it
// makes (the NVIDIA driver's /proc/driver/nvidia/version) are there by then (Linux 4.13+,
// "module: delay kobject uevent until after module init call"); remove@ comes once it is gone.
func Module(prefix string) func(Uevent) bool {
	return func(ev Uevent) bool {
		name, ok := strings.CutPrefix(ev.DevPath, "/module/")
		return ok && ev.Subsystem == "module" && (ev.Action == "add" || ev.Action == "remove") && strings.HasPrefix(name, prefix)
	}
}

// Uevents pokes t with why for every kernel uevent match accepts, until ctx ends: the
// kernel's broadcast on NETLINK_KOBJECT_UEVENT, which needs no privilege to receive and reaches
// the host's network namespace and every one owned by the initial user namespace (any pod
// that does not set hostUsers: false). A lost burst (the socket's buffer overran) pokes too.
// The error is only about opening the socket; the caller then falls back to what it did
// without events.
func (t *Trigger) Uevents(ctx context.Context, log *slog.Logger, match func(Uevent) bool, why string) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return fmt.Errorf("kernel uevents: netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
		unix.Close(fd)
		return fmt.Errorf("kernel uevents: joining the kernel's broadcast: %w", err)
	}
	// A larger buffer rides out a burst (udev coldplug, a driver's many device events); the
	// kernel caps it at net.core.rmem_max without CAP_NET_ADMIN, which is fine.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	f := os.NewFile(uintptr(fd), "uevent") // non-blocking: reads go through the runtime's poller, and Close ends them
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return fmt.Errorf("kernel uevents: %w", err)
	}
	go func() {
		<-ctx.Done()
		f.Close()
	}()
	go func() {
		buf := make([]byte, 64<<10)
		for {
			var n int
			var from unix.Sockaddr
			var rerr error
			err := rc.Read(func(fd uintptr) bool {
				n, from, rerr = unix.Recvfrom(int(fd), buf, 0)
				return rerr != unix.EAGAIN
			})
			switch {
			case err != nil: // closed: ctx ended
				return
			case errors.Is(rerr, unix.ENOBUFS):
				log.Warn("kernel uevents were lost (socket buffer overrun); checking at once")
				t.Poke(why)
				continue
			case rerr != nil:
				log.Warn("kernel uevents stopped; the interval carries driver changes from now on", "error", rerr)
				return
			}
			// Only the kernel (port 0) sends on this group; anything else is not a uevent.
			if nl, ok := from.(*unix.SockaddrNetlink); !ok || nl.Pid != 0 {
				continue
			}
			if ev, ok := parseUevent(buf[:n]); ok && match(ev) {
				t.Poke(why)
			}
		}
	}()
	return nil
}
