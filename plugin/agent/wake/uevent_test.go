package wake

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"
)

// The kernel's messages as it sends them; Module picks the NVIDIA modules' loads and unloads.
func TestParseUeventAndModule(t *testing.T) {
	msg := func(head string, kv ...string) []byte {
		return []byte(head + "\x00" + strings.Join(kv, "\x00") + "\x00")
	}
	nvidia := Module("nvidia")
	for _, tc := range []struct {
		raw  []byte
		want bool
	}{
		{msg("add@/module/nvidia", "ACTION=add", "DEVPATH=/module/nvidia", "SUBSYSTEM=module", "SEQNUM=4711"), true},
		{msg("remove@/module/nvidia_uvm", "ACTION=remove", "DEVPATH=/module/nvidia_uvm", "SUBSYSTEM=module"), true},
		{msg("change@/module/nvidia", "ACTION=change", "DEVPATH=/module/nvidia", "SUBSYSTEM=module"), false},
		{msg("add@/module/nvme", "ACTION=add", "DEVPATH=/module/nvme", "SUBSYSTEM=module"), false},
		{msg("add@/devices/virtual/nvidia-caps/nvidia-cap1", "ACTION=add", "DEVPATH=/devices/virtual/nvidia-caps/nvidia-cap1", "SUBSYSTEM=nvidia-caps"), false},
		{append([]byte("libudev\x00\xfe\xed\xca\xfe"), msg("", "ACTION=add", "DEVPATH=/module/nvidia", "SUBSYSTEM=module")...), false},
	} {
		ev, ok := parseUevent(tc.raw)
		if got := ok && nvidia(ev); got != tc.want {
			t.Errorf("%q: parsed %+v (%v), Module(nvidia) %v, want %v", tc.raw, ev, ok, got, tc.want)
		}
	}
}

// A real uevent from this machine's kernel reaches the Trigger. The kernel here has no loadable
// modules, so the test asks sysfs for a synthetic "change" of /dev/null (root only), which
// travels the same netlink broadcast as a module's add and remove.
func TestUeventsFromTheKernel(t *testing.T) {
	const null = "/sys/class/mem/null/uevent"
	if f, err := os.OpenFile(null, os.O_WRONLY, 0); err != nil {
		t.Skipf("cannot ask the kernel for a uevent: %v", err)
	} else {
		f.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr := New()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	match := func(ev Uevent) bool {
		return ev.Action == "change" && ev.DevPath == "/devices/virtual/mem/null" && ev.Subsystem == "mem"
	}
	if err := tr.Uevents(ctx, log, match, "null changed"); err != nil {
		t.Fatal(err)
	}
	// The socket is bound before Uevents returns, so the kernel queues what follows for it.
	if err := os.WriteFile(null, []byte("change"), 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tr.C():
		if why := tr.Take(); len(why) != 1 || why[0] != "null changed" {
			t.Errorf("poked for %v", why)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the kernel's uevent never reached the Trigger")
	}
}
