package mutexd

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// Each check of a lease compares its deadline with the clock itself: a lease whose
// deadline passed while nothing of the process ran (SIGSTOP, a frozen VM) is lost at the
// first check, before any timer or renewer has run. Here there is none at all: the lease
// is not started.
func TestEveryCheckSeesTheDeadlineWithNoGoroutine(t *testing.T) {
	c, err := New("http://127.0.0.1:9", nil) // never asked
	if err != nil {
		t.Fatal(err)
	}
	checks := map[string]func(l *Lease, ctx context.Context) bool{
		"Held":        func(l *Lease, _ context.Context) bool { return !l.Held() },
		"Err":         func(l *Lease, _ context.Context) bool { return l.Err() != nil },
		"Remaining":   func(l *Lease, _ context.Context) bool { return l.Remaining() == 0 },
		"Done":        func(l *Lease, _ context.Context) bool { return closed(l.Done()) },
		"Context.Err": func(_ *Lease, ctx context.Context) bool { return ctx.Err() != nil },
		"Context.Done": func(_ *Lease, ctx context.Context) bool {
			return closed(ctx.Done())
		},
	}
	for name, lost := range checks {
		g := &Grant{Resource: "r", LeaseID: NewLeaseID(), FencingToken: 7, TTL: time.Second,
			ExpiresIn: time.Second, Deadline: time.Now().Add(60 * time.Millisecond)}
		l := newLease(c, g)
		ctx, cancel := l.Context(context.Background())
		if l.Deadline() != g.Deadline.Add(-20*time.Millisecond) {
			t.Fatalf("the margin of a 1 s lease is %v", g.Deadline.Sub(l.Deadline()))
		}
		if lost(l, ctx) {
			t.Fatalf("%s: lost before its deadline", name)
		}
		time.Sleep(time.Until(l.Deadline()) + 5*time.Millisecond)
		if !lost(l, ctx) {
			t.Errorf("%s does not look at the clock", name)
		}
		err := l.Err()
		if !errors.Is(err, ErrLeaseExpired) || !strings.Contains(err.Error(), "did not run in time") {
			t.Errorf("%s: %v", name, err)
		}
		if !closed(ctx.Done()) || LeaseFromContext(ctx) != l {
			t.Errorf("%s: the context", name)
		}
		cancel()
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
