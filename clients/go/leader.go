package mutexd

import (
	"context"
	"errors"
	"time"
)

// LeaderOptions are the options of RunWhenLeader. The zero value is valid.
type LeaderOptions struct {
	// TTL is the lease's time to live; default 15 s. It is renewed every third of it.
	TTL time.Duration
	// RetryInterval is the pause between two tries to acquire the lease; default 5 s.
	RetryInterval time.Duration
	// Owner and Metadata are Acquire's.
	Owner    string
	Metadata interface{}
	// OnStandby, if set, is called each time the lease could not be acquired (held by
	// another, or a failure that may pass), before waiting RetryInterval.
	OnStandby func(err error, retry time.Duration)
}

// DefaultRetryInterval is the RetryInterval of RunWhenLeader when none is given.
const DefaultRetryInterval = 5 * time.Second

// RunWhenLeader runs fn whenever this process holds the lease on resource: the leader
// election loop. Until ctx ends:
//
//  1. Try to acquire the lease, without waiting in the queue. When it is held by another
//     (ErrLeaseHeld), or the call failed for a reason that may pass (IsRetryable), call
//     OnStandby if set, wait RetryInterval (or until ctx ends) and try again. Any other
//     error (a bad name or TTL, a refused token) is returned: trying again cannot help.
//  2. Granted: renew the lease in the background every third of its TTL, and call
//     fn(leaderCtx, token) in this goroutine. token is the lease's fencing token, to pass
//     to what the leader writes to.
//  3. Lost (a renewal answered lease_lost, or no renewal succeeded before the lease's
//     deadline on this process's monotonic clock): leaderCtx is cancelled at that very
//     moment. fn must stop its work at once and return. leaderCtx.Err() compares the
//     deadline with the clock itself: check it right before each leader action, so that
//     a leader paused past its deadline (SIGSTOP, a frozen VM) stops before acting once
//     more. The loop waits for fn to return, however long that takes, so two calls of fn
//     never overlap; it does not release a lease taken over by another (one lost by its
//     deadline is released, in case nothing was granted since), and goes back to step 1
//     at once.
//  4. ctx ends (the way to end the loop, for example on SIGTERM): leaderCtx is cancelled,
//     the loop waits for fn to return, releases the lease so that another process takes
//     over at once, and returns nil.
//  5. fn returns nil while the lease is held: the lease is released and the loop waits
//     RetryInterval before step 1. fn returns an error (other than leaderCtx's own once it
//     ended): the lease is released and RunWhenLeader returns that error.
//
// LeaseFromContext(leaderCtx) is the *Lease of this term of leadership.
func (c *Client) RunWhenLeader(ctx context.Context, resource string, fn func(ctx context.Context, token uint64) error, opts *LeaderOptions) error {
	var o LeaderOptions
	if opts != nil {
		o = *opts
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.RetryInterval == 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	if o.TTL < 0 || o.RetryInterval < 0 {
		return durationError("TTL and RetryInterval")
	}
	// One proposed lease id per grant: an attempt whose answer was lost, repeated, gets
	// its own lease back instead of finding it held by another.
	leaseID := NewLeaseID()
	for ctx.Err() == nil {
		g, err := c.Acquire(ctx, resource, &AcquireOptions{Owner: o.Owner, TTL: o.TTL,
			LeaseID: leaseID, Metadata: o.Metadata})
		if err != nil {
			if ctx.Err() != nil {
				// Stopped while the acquire was under way: its grant, if any, is given back.
				c.releaseQuietly(resource, leaseID)
				return nil
			}
			if !errors.Is(err, ErrLeaseHeld) && !IsRetryable(err) {
				return err
			}
			if o.OnStandby != nil {
				o.OnStandby(err, o.RetryInterval)
			}
			sleep(ctx, o.RetryInterval)
			continue
		}
		leaseID = NewLeaseID()
		if ctx.Err() != nil { // stopped while the acquire was under way: give it back
			c.releaseQuietly(resource, g.LeaseID)
			return nil
		}
		lease := c.Hold(g)
		byItself, err := c.lead(ctx, lease, fn)
		if err != nil {
			return err
		}
		if byItself {
			sleep(ctx, o.RetryInterval)
		}
	}
	return nil
}

// lead is one term of leadership: it reports whether fn returned by itself while the
// lease was held, and fn's error.
func (c *Client) lead(ctx context.Context, lease *Lease, fn func(context.Context, uint64) error) (bool, error) {
	leaderCtx, cancel := lease.Context(ctx)
	err := fn(leaderCtx, lease.Token())
	ended := leaderCtx.Err() != nil
	byItself := !ended && lease.Held()
	cancel()
	rctx, rcancel := context.WithTimeout(context.Background(), c.timeout)
	_ = lease.Release(rctx)
	rcancel()
	if err != nil && !(ended && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))) {
		return false, err
	}
	return byItself, nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
