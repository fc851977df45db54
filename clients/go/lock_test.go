package mutexd_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mutexd "github.com/mutexd/mutexd/clients/go"
)

const lockTTL = 1500 * time.Millisecond // a renewal every 0.5 s

func TestLockRenewsAndTheLeaseOutlivesSeveralTTLs(t *testing.T) {
	s := server(t)
	c, other := newClient(t, s.URL, nil), newClient(t, s.URL, nil)
	ctx, res := ctxOf(t), name(t)
	const ttl = time.Second // a renewal every third of a second
	lease, err := c.Lock(ctx, res, &mutexd.LockOptions{TTL: ttl, Metadata: map[string]string{"address": "host-a:9000"}})
	if err != nil {
		t.Fatal(err)
	}
	token := lease.Token()
	if lease.Resource() != res || len(lease.LeaseID()) != 36 || string(lease.Grant().Metadata) != `{"address":"host-a:9000"}` {
		t.Fatalf("%v %+v", lease, lease.Grant())
	}
	// Readers on other goroutines while the renewer works (go test -race looks at this).
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = lease.Held()
				_ = lease.Err()
				_ = lease.Remaining()
				_ = lease.Grant()
				_ = lease.Deadline()
				_ = lease.Renewals()
				_ = lease.Token()
				time.Sleep(time.Millisecond)
			}
		}()
	}
	heldFor(t, lease, ttl, func(time.Duration) {
		st, err := other.Get(ctx, res)
		if err != nil || !st.Held() || st.Holder.FencingToken != token {
			t.Fatalf("%+v %v", st, err)
		}
	})
	close(stop)
	wg.Wait()
	if lease.Token() != token || lease.Grant().FencingToken != token || lease.Grant().RenewedAt.IsZero() {
		t.Fatal("a renewal changed the token")
	}
	_, err = other.Acquire(ctx, res, nil)
	mustIs(t, err, mutexd.ErrLeaseHeld)
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := other.Get(ctx, res); st.Held() {
		t.Fatal("not released")
	}
	releasedTwice(t, ctx, lease)
}

func TestLockWaitsForTheHolder(t *testing.T) {
	s := server(t)
	c, other := newClient(t, s.URL, nil), newClient(t, s.URL, nil)
	ctx, res := ctxOf(t), name(t)
	first, err := c.Lock(ctx, res, &mutexd.LockOptions{TTL: lockTTL})
	if err != nil {
		t.Fatal(err)
	}
	second := grantedOnRelease(t, ctx, first, func() (held, error) {
		return other.Lock(ctx, res, &mutexd.LockOptions{TTL: lockTTL, Wait: 10 * time.Second})
	}).(*mutexd.Lease)
	if second.Token() <= first.Token() {
		t.Fatal("the token did not grow")
	}
}

func TestLockWaitRunsOut(t *testing.T) {
	s := server(t)
	c, other := newClient(t, s.URL, nil), newClient(t, s.URL, nil)
	ctx, res := ctxOf(t), name(t)
	holder, err := c.Acquire(ctx, res, &mutexd.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = other.Lock(ctx, res, &mutexd.LockOptions{TTL: lockTTL, Wait: 500 * time.Millisecond})
	mustIs(t, err, mutexd.ErrLeaseHeld)
	if took := time.Since(start); took < 400*time.Millisecond || took > 3*time.Second {
		t.Fatalf("after %v", took)
	}
	if e := apiError(t, err); e.Holder == nil || e.Holder.FencingToken != holder.FencingToken {
		t.Fatalf("%+v", e)
	}
}

func TestDoneClosesAtOnceWhenTheLeaseIsBroken(t *testing.T) {
	s := server(t)
	c, other := newClient(t, s.URL, nil), newClient(t, s.URL, nil)
	ctx, res := ctxOf(t), name(t)
	lease, err := c.Lock(ctx, res, &mutexd.LockOptions{TTL: lockTTL})
	if err != nil {
		t.Fatal(err)
	}
	var calls int32
	lease.OnLost(func() {
		atomic.AddInt32(&calls, 1)
		// A callback may release the lease: called once the renewer has ended.
		_ = lease.Release(context.Background())
	})
	leaseCtx, cancel := lease.Context(ctx)
	defer cancel()
	if mutexd.LeaseFromContext(leaseCtx) != lease {
		t.Fatal("LeaseFromContext")
	}
	// The next renewal, at most a third of the TTL away, is answered lease_lost.
	lostWhenBroken(t, ctx, other, res, lease)
	select {
	case <-leaseCtx.Done():
		mustIs(t, leaseCtx.Err(), context.Canceled)
	case <-time.After(time.Second):
		t.Fatal("the lease's context was not cancelled")
	}
	// Someone else takes it; releasing the lost lease leaves theirs alone.
	theirs, err := other.Acquire(ctx, res, &mutexd.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	mustIs(t, lease.Release(ctx), mutexd.ErrLeaseLost)
	st, err := other.Get(ctx, res)
	if err != nil || st.Holder == nil || st.Holder.FencingToken != theirs.FencingToken {
		t.Fatalf("%+v %v", st, err)
	}
	within(t, time.Second, "the callback ran", func() bool { return atomic.LoadInt32(&calls) == 1 })
	time.Sleep(100 * time.Millisecond)
	if n := atomic.LoadInt32(&calls); n != 1 {
		t.Fatalf("%d calls", n)
	}
	called := false
	lease.OnLost(func() { called = true }) // lost already: at once
	if !called {
		t.Fatal("OnLost after the loss")
	}
}

func TestDoneClosesAtTheDeadlineWhenTheServerDies(t *testing.T) {
	s := server(t)
	c := newClient(t, s.URL, &mutexd.Options{Timeout: 2 * time.Second})
	ctx, res := ctxOf(t), name(t)
	lease, err := c.Lock(ctx, res, &mutexd.LockOptions{TTL: lockTTL})
	if err != nil {
		t.Fatal(err)
	}
	// Renewals fail (refused) and are tried again until the deadline, counted from the
	// last successful renewal on the monotonic clock.
	lostAtItsDeadline(t, s, lease)
	err = lease.Err()
	mustIs(t, err, mutexd.ErrMutexd)
	if errors.Is(err, mutexd.ErrAPI) || mutexd.IsRetryable(err) {
		t.Fatal(err)
	}
	if !strings.Contains(err.Error(), "last error") {
		t.Fatalf("the loss does not name the last failure: %v", err)
	}
	// The release fails (no server) and says so.
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	mustIs(t, lease.Release(rctx), mutexd.ErrTransport)
}

func TestALeasePastItsDeadlineIsLostAtTheFirstCheck(t *testing.T) {
	s := server(t)
	c := newClient(t, s.URL, nil)
	ctx, res := ctxOf(t), name(t)
	g, err := c.Acquire(ctx, res, &mutexd.AcquireOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if m := mutexd.SafetyMargin(time.Second); m != 20*time.Millisecond {
		t.Fatalf("margin %v", m)
	}
	if m := mutexd.SafetyMargin(time.Hour); m != time.Second {
		t.Fatalf("margin %v", m)
	}
	// As a process resumed after a pause finds it: the deadline passed and nothing ran
	// since. The first check says so, whatever the goroutines have done.
	late := *g
	late.Deadline = time.Now().Add(-time.Millisecond)
	lease := c.Hold(&late)
	if lease.Held() {
		t.Fatal("held past its deadline")
	}
	err = lease.Err()
	mustIs(t, err, mutexd.ErrLeaseExpired)
	if !strings.Contains(err.Error(), "did not run in time") {
		t.Fatal(err)
	}
	select {
	case <-lease.Done():
	default:
		t.Fatal("Done is not closed")
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("nothing was granted since: the release succeeds: %v", err)
	}

	// The deadline of a held lease: its answer's, less the margin.
	g, err = c.Acquire(ctx, res, &mutexd.AcquireOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lease = c.Hold(g)
	defer lease.Release(ctx)
	if d := g.Deadline.Sub(lease.Deadline()); d != 20*time.Millisecond {
		t.Fatalf("the margin is %v", d)
	}
}

func TestRenewalsToASilentServerAreCutShort(t *testing.T) {
	s := server(t)
	c := newClient(t, s.URL, nil)
	ctx, res := ctxOf(t), name(t)
	q := newSilent(t)
	g, err := c.Acquire(ctx, res, &mutexd.AcquireOptions{TTL: lockTTL})
	if err != nil {
		t.Fatal(err)
	}
	quiet := newClient(t, q.URL, &mutexd.Options{Timeout: 10 * time.Second})
	lease := quiet.Hold(g)
	defer lease.Stop()
	select {
	case <-lease.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("Done did not close")
	}
	err = lease.Err()
	mustIs(t, err, mutexd.ErrLeaseExpired)
	// Each attempt may take a third of the TTL: several fail, with their own error.
	if !strings.Contains(err.Error(), "no answer within") {
		t.Fatal(err)
	}
	accepted, _ := q.times()
	if len(accepted) < 2 {
		t.Fatalf("%d attempts", len(accepted))
	}
}

func TestALeaseLostOnItsDeadlineWhateverTheServers(t *testing.T) {
	// Three silent servers: the renewal is bounded by the lease's deadline as a whole,
	// not only each attempt.
	s := server(t)
	c := newClient(t, s.URL, nil)
	ctx, res := ctxOf(t), name(t)
	q := []*silent{newSilent(t), newSilent(t), newSilent(t)}
	g, err := c.Acquire(ctx, res, &mutexd.AcquireOptions{TTL: lockTTL})
	if err != nil {
		t.Fatal(err)
	}
	group := newClient(t, q[0].URL+","+q[1].URL+","+q[2].URL, &mutexd.Options{Timeout: 10 * time.Second})
	lease := group.Hold(g)
	deadline := lease.Deadline()
	select {
	case <-lease.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done did not close")
	}
	if late := time.Since(deadline); late > 300*time.Millisecond {
		t.Fatalf("lost %v after the deadline", late)
	}
	lease.Stop()
	time.Sleep(200 * time.Millisecond)
	attemptsWithin(t, q, deadline)
}

func TestNoGoroutineIsLeftBehind(t *testing.T) {
	s := server(t)
	c := newClient(t, s.URL, nil)
	ctx, res := ctxOf(t), name(t)
	count := func() int { c.Close(); time.Sleep(50 * time.Millisecond); return runtime.NumGoroutine() }
	before := count()
	for i := 0; i < 3; i++ {
		lease, err := c.Lock(ctx, res, &mutexd.LockOptions{TTL: lockTTL})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	within(t, 2*time.Second, "the goroutines ended", func() bool { return count() <= before })
}

func TestLockGivesBackAGrantWhoseAnswerWasLost(t *testing.T) {
	// The acquire reaches the server, which grants it; the answer never comes back. The
	// lease proposed is released before the error is returned.
	s := server(t)
	ctx, res := ctxOf(t), name(t)
	p := newLossy(t, s.URL) // passes the acquire on, drops its answer
	lossy := newClient(t, p.URL+","+deadURL(t), &mutexd.Options{Timeout: 2 * time.Second})
	_, err := lossy.Lock(ctx, res, &mutexd.LockOptions{TTL: 10 * time.Second})
	mustIs(t, err, mutexd.ErrTransport)
	st, err := newClient(t, s.URL, nil).Get(ctx, res)
	if err != nil || st.Held() {
		t.Fatalf("the lost grant was not given back: %+v %v", st, err)
	}
}
