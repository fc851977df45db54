package mutexd_test

import (
	"context"
	"testing"
	"time"

	mutexd "github.com/mutexd/mutexd/clients/go"
)

func TestASemaphoreOfThree(t *testing.T) {
	s := server(t)
	c := newClient(t, s.URL, nil)
	ctx, res := ctxOf(t), name(t)
	var grants []*mutexd.Grant
	for i := 0; i < 3; i++ {
		g, err := c.Acquire(ctx, res, &mutexd.AcquireOptions{Limit: 3, TTL: 10 * time.Second, Owner: "enc"})
		if err != nil {
			t.Fatal(err)
		}
		if g.Limit != 3 || g.Shared || (i > 0 && g.FencingToken <= grants[i-1].FencingToken) {
			t.Fatalf("%+v", g)
		}
		grants = append(grants, g)
	}
	_, err := c.Acquire(ctx, res, &mutexd.AcquireOptions{Limit: 3})
	mustIs(t, err, mutexd.ErrLeaseHeld)
	if e := apiError(t, err); e.Holder == nil || e.Holder.FencingToken != grants[0].FencingToken {
		t.Fatalf("the holder whose lease ends first: %+v", e.Holder)
	}
	for _, limit := range []int{2, 0} { // another limit, or none (1)
		_, err = c.Acquire(ctx, res, &mutexd.AcquireOptions{Limit: limit})
		mustIs(t, err, mutexd.ErrLimitMismatch)
		mustIs(t, err, mutexd.ErrConflict)
		if e := apiError(t, err); e.Limit != 3 || e.Code != "limit_mismatch" {
			t.Fatalf("%+v", e)
		}
	}
	st, err := c.Get(ctx, res)
	if err != nil || st.Limit != 3 || len(st.Holders) != 3 || st.Holder.FencingToken != grants[0].FencingToken {
		t.Fatalf("%+v %v", st, err)
	}
	// Breaking one lease frees one place; the others keep theirs.
	if broken, err := c.Break(ctx, res, &mutexd.BreakOptions{LeaseID: grants[1].LeaseID, Reason: "stuck"}); err != nil || !broken {
		t.Fatal(broken, err)
	}
	st, _ = c.Get(ctx, res)
	if len(st.Holders) != 2 || st.Holders[1].FencingToken != grants[2].FencingToken {
		t.Fatalf("%+v", st.Holders)
	}
	if _, err := c.Renew(ctx, res, grants[0].LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(ctx, res, &mutexd.AcquireOptions{Limit: 0, TTL: time.Second, Wait: 0})
	mustIs(t, err, mutexd.ErrLimitMismatch)
	if _, err := c.Acquire(ctx, res, &mutexd.AcquireOptions{Limit: 3}); err != nil {
		t.Fatalf("the freed place: %v", err)
	}
}

func TestSharedLeasesAndAWaitingWriter(t *testing.T) {
	s := server(t)
	c := newClient(t, s.URL, nil)
	ctx, res := ctxOf(t), name(t)
	r1, err := c.Acquire(ctx, res, &mutexd.AcquireOptions{Shared: true, TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.Acquire(ctx, res, &mutexd.AcquireOptions{Shared: true, TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !r1.Shared || !r2.Shared {
		t.Fatal("not shared")
	}
	_, err = c.Acquire(ctx, res, &mutexd.AcquireOptions{Shared: true, Limit: 2})
	mustIs(t, err, mutexd.ErrInvalidRequest)
	if e := apiError(t, err); e.Field != "shared" {
		t.Fatalf("%+v", e)
	}
	// A writer waits for both readers; a reader that comes after it waits behind it.
	writer := make(chan *mutexd.Lease, 1)
	go func() {
		l, err := c.Lock(ctx, res, &mutexd.LockOptions{TTL: 5 * time.Second, Wait: 10 * time.Second})
		if err != nil {
			t.Error(err)
		}
		writer <- l
	}()
	within(t, 3*time.Second, "the writer queued", func() bool {
		st, err := c.Get(ctx, res)
		return err == nil && st.Waiters == 1
	})
	_, err = c.Acquire(ctx, res, &mutexd.AcquireOptions{Shared: true})
	mustIs(t, err, mutexd.ErrLeaseHeld)
	_ = c.Release(ctx, res, r1.LeaseID)
	select {
	case <-writer:
		t.Fatal("the writer was granted beside a reader")
	case <-time.After(200 * time.Millisecond):
	}
	_ = c.Release(ctx, res, r2.LeaseID)
	var w *mutexd.Lease
	select {
	case w = <-writer:
	case <-time.After(3 * time.Second):
		t.Fatal("the writer was not granted")
	}
	if w == nil {
		t.FailNow()
	}
	if w.Grant().Shared || w.Token() <= r2.FencingToken {
		t.Fatalf("%+v", w.Grant())
	}
	st, _ := c.Get(ctx, res)
	if len(st.Holders) != 1 || st.Holders[0].Shared {
		t.Fatalf("%+v", st.Holders)
	}
	_ = w.Release(ctx)
}

func TestLockWithALimitAndShared(t *testing.T) {
	s := server(t)
	c := newClient(t, s.URL, nil)
	ctx, res := ctxOf(t), name(t)
	var slots []*mutexd.Lease
	for i := 0; i < 2; i++ {
		l, err := c.Lock(ctx, res, &mutexd.LockOptions{Limit: 2, TTL: lockTTL})
		if err != nil {
			t.Fatal(err)
		}
		slots = append(slots, l)
	}
	_, err := c.Lock(ctx, res, &mutexd.LockOptions{Limit: 2, TTL: lockTTL})
	mustIs(t, err, mutexd.ErrLeaseHeld)
	time.Sleep(lockTTL) // renewed, each on its own
	for _, l := range slots {
		if !l.Held() || l.Grant().Limit != 2 || l.Renewals() < 1 {
			t.Fatalf("%v %+v", l, l.Grant())
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	reader, err := c.Lock(ctx, res, &mutexd.LockOptions{Shared: true, TTL: lockTTL})
	if err != nil {
		t.Fatal(err)
	}
	if !reader.Grant().Shared {
		t.Fatal("not shared")
	}
	_ = reader.Release(ctx)
}
