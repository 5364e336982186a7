// Package wake turns what happens on a node, and to its Node object, into reconcile triggers
// for the agent's loops, so a stage opens as soon as its check can pass instead of at the next
// interval. A Trigger coalesces: any number of events before the loop looks cost one
// reconcile. Every source is best effort: one that fails is logged and re-established, and
// the loop's interval stays the safety net.
package wake

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Trigger is a coalescing wake-up with the reasons that caused it.
type Trigger struct {
	c   chan struct{}
	mu  sync.Mutex
	why map[string]bool
}

// New returns a Trigger with nothing pending.
func New() *Trigger { return &Trigger{c: make(chan struct{}, 1), why: map[string]bool{}} }

// Poke asks for one reconcile; why names the source (e.g. "toolkit status file").
func (t *Trigger) Poke(why string) {
	t.mu.Lock()
	t.why[why] = true
	t.mu.Unlock()
	select {
	case t.c <- struct{}{}:
	default:
	}
}

// C receives once per burst of Pokes.
func (t *Trigger) C() <-chan struct{} {
	if t == nil {
		return nil // a nil Trigger never fires: the loop runs on its interval alone
	}
	return t.c
}

// Wait returns when t fires (a burst of Pokes), when d has passed (the resync) or with
// ctx's error when ctx ends. It leaves the reasons pending: the loop Takes them right before
// it reconciles. A nil Trigger waits for d alone.
func (t *Trigger) Wait(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
	case <-timer.C:
	}
	return nil
}

// Take clears what is pending and returns its reasons, sorted; nil when none. A loop calls it
// right before it reconciles: events up to then are covered by that reconcile.
func (t *Trigger) Take() []string {
	if t == nil {
		return nil
	}
	select {
	case <-t.c:
	default:
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.why) == 0 {
		return nil
	}
	out := make([]string, 0, len(t.why))
	for k := range t.why {
		out = append(out, k)
	}
	clear(t.why)
	slices.Sort(out)
	return out
}

// Backoff is the delay before re-establishing a failed source: from 1s, doubling, capped.
type Backoff struct {
	Max time.Duration
	cur time.Duration
}

// Next returns the delay to wait now and doubles the following one.
func (b *Backoff) Next() time.Duration {
	if b.cur == 0 {
		b.cur = time.Second
	}
	d := min(b.cur, max(b.Max, time.Second))
	b.cur = d * 2
	return d
}

// Reset starts the delays from 1s again, after a source worked.
func (b *Backoff) Reset() { b.cur = 0 }

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
