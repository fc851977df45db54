package mutexd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// SafetyMargin is how long before the end of its TTL a client stops counting on a lease:
// a fiftieth of the TTL, at most 1 s. It covers the rate difference of two clocks and the
// moment between a check and the action it guards.
func SafetyMargin(ttl time.Duration) time.Duration {
	m := ttl / 50
	if m > time.Second {
		m = time.Second
	}
	return m
}

// LockOptions are the options of Lock. The zero value is an exclusive lease of 15 s that
// does not wait.
type LockOptions struct {
	// TTL is the lease's time to live; default 15 s. It is renewed every third of it.
	TTL time.Duration
	// Wait is how long to wait in the resource's queue when it is held; 0: not at all
	// (ErrLeaseHeld at once).
	Wait time.Duration
	// Owner, Metadata, Limit and Shared are Acquire's.
	Owner    string
	Metadata interface{}
	Limit    int
	Shared   bool
}

// DefaultTTL is the TTL of Lock and RunWhenLeader when none is given.
const DefaultTTL = 15 * time.Second

// Lock acquires a lease on resource and keeps it alive in the background until Release.
//
// The lease is renewed every third of its TTL. Its Done channel is closed, and Err says
// why, the moment the lease is lost: a renewal answered lease_lost (ErrLeaseLost), or no
// renewal succeeded before the lease's deadline (ErrLeaseExpired). The deadline is on
// this process's monotonic clock: when the last successful renewal (or the acquire) was
// sent, plus the remaining time it was answered, less a safety margin (SafetyMargin).
// Renewals that fail for a transient reason are tried again every tenth of the TTL (at
// most every second), each on a new connection, until then; one attempt takes at most a
// third of the TTL, and never lasts past the deadline.
//
// Stop the guarded work at once when the lease is lost; check Held (or Err) right before
// each step of it: they compare the deadline with the clock themselves, so a process
// paused past it (SIGSTOP, a frozen VM) knows at its first check after resuming. Pass
// Token to what you protect.
//
// When the acquire got no usable answer (the grant may have happened without it
// reaching us), the proposed lease is released, best effort, before the error is
// returned.
func (c *Client) Lock(ctx context.Context, resource string, opts *LockOptions) (*Lease, error) {
	gs, err := c.lock(ctx, []string{resource}, false, opts)
	if err != nil {
		return nil, err
	}
	return c.Hold(gs[0]), nil
}

// lock is the acquire of Lock (on resources[0]) or, many, of LockMany, with a new lease
// id. When it got no usable answer (the grant may have happened without it reaching us),
// the proposed lease is released, best effort, before the error is returned.
func (c *Client) lock(ctx context.Context, resources []string, many bool, opts *LockOptions) ([]*Grant, error) {
	var o LockOptions
	if opts != nil {
		o = *opts
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	leaseID := NewLeaseID()
	gs, err := c.acquire(ctx, resources, many, &AcquireOptions{Owner: o.Owner, TTL: o.TTL, Wait: o.Wait,
		LeaseID: leaseID, Metadata: o.Metadata, Limit: o.Limit, Shared: o.Shared})
	if err != nil {
		if errors.Is(err, ErrTransport) || errors.Is(err, context.Canceled) ||
			errors.Is(err, context.DeadlineExceeded) {
			c.quietly(func(ctx context.Context) error { return c.release(ctx, resources, many, leaseID) })
		}
		return nil, err
	}
	return gs, nil
}

// releaseQuietly gives back a lease that may have been granted, within the client's
// timeout, whatever the caller's context.
func (c *Client) releaseQuietly(resource, leaseID string) {
	c.quietly(func(ctx context.Context) error { return c.Release(ctx, resource, leaseID) })
}

// quietly calls f (a release of what may have been granted) within the client's timeout,
// whatever the caller's context; its error is ignored.
func (c *Client) quietly(f func(ctx context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	_ = f(ctx)
}

// holding is what a Lease, and a LeaseSet of LockOrdered, know of their hold: whether it
// is lost and why, whom to tell then, and whether it was released. mu guards it (and the
// rest of a Lease).
type holding struct {
	mu       sync.Mutex
	lost     bool
	err      error
	released bool
	relErr   error
	onLost   []func()
	done     chan struct{} // closed when lost
}

// loseLocked marks it lost by err (mu is held); it returns the callbacks to call, once mu
// is released.
func (h *holding) loseLocked(err error) []func() {
	h.lost = true
	h.err = err
	close(h.done)
	callbacks := h.onLost
	h.onLost = nil
	return callbacks
}

// lossErr is why it was lost; nil while it is not.
func (h *holding) lossErr() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// holds reports whether it is neither lost nor released.
func (h *holding) holds() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.lost && !h.released
}

// addOnLost has f called right after the loss; at once if it is lost already.
func (h *holding) addOnLost(f func()) {
	h.mu.Lock()
	if !h.lost {
		h.onLost = append(h.onLost, f)
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	f()
}

// releaseOnce calls release, with the loss's error (nil: not lost), the first time it is
// called; every call returns that release's result.
func (h *holding) releaseOnce(release func(lostErr error) error) error {
	h.mu.Lock()
	if h.released {
		err := h.relErr
		h.mu.Unlock()
		return err
	}
	h.released = true
	lostErr := h.err
	h.mu.Unlock()
	err := release(lostErr)
	h.mu.Lock()
	h.relErr = err
	h.mu.Unlock()
	return err
}

// Lease is a lease kept alive in the background (Lock, RunWhenLeader, Hold). Its methods
// may be called from any goroutine.
type Lease struct {
	c        *Client
	margin   time.Duration
	resource string // these three never change
	leaseID  string
	token    uint64

	holding  // its mu guards the rest
	grant    Grant
	deadline time.Time // the last answer's deadline, less the margin
	base     time.Time // when the last successful renewal (or the acquire) was sent
	lastErr  error
	inflight time.Time // when the renewal under way was sent; zero: none
	renewals int
	stopped  bool

	// How it is renewed and released: its own resource's calls, or (the core of a
	// LeaseSet of LockMany) the set's. label names what is held, in messages.
	renewFn     func(ctx context.Context, o *RenewOptions) (*Grant, error)
	releaseFn   func(ctx context.Context) error
	releaseLost bool // Release releases even after a lease_lost answer (a set: what it still holds)
	label       string

	stop   context.CancelFunc // ends the renewer
	exited chan struct{}      // closed when the renewer has returned
	timer  *time.Timer        // fires at the deadline
}

// Hold keeps a granted lease alive in the background, as Lock does with the lease it
// acquires.
func (c *Client) Hold(g *Grant) *Lease {
	l := newLease(c, g)
	l.start()
	return l
}

// newLease is a lease that nothing renews or watches yet: only the clock, when asked.
func newLease(c *Client, g *Grant) *Lease {
	l := &Lease{c: c, grant: *g, margin: SafetyMargin(g.TTL), resource: g.Resource,
		leaseID: g.LeaseID, token: g.FencingToken, holding: holding{done: make(chan struct{})},
		exited: make(chan struct{}), stop: func() {}, label: "lease on " + g.Resource}
	l.deadline = g.Deadline.Add(-l.margin)
	l.base = g.Deadline.Add(-g.ExpiresIn)
	return l
}

// start starts the renewer and the timer of the deadline.
func (l *Lease) start() {
	ctx, cancel := context.WithCancel(context.Background())
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stop = cancel
	l.timer = time.AfterFunc(time.Until(l.deadline), func() { l.expireIfDue() })
	go l.renewLoop(ctx)
}

// Resource is the lease's resource.
func (l *Lease) Resource() string { return l.resource }

// LeaseID is the lease's id: the credential that renews and releases it.
func (l *Lease) LeaseID() string { return l.leaseID }

// Token is the lease's fencing token (a renewal keeps it). Pass it to what you protect.
func (l *Lease) Token() uint64 { return l.token }

// Grant is the lease as the last successful acquire or renewal answered it.
func (l *Lease) Grant() Grant {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.grant
}

// Done is closed the moment the lease is lost (Err says why). Releasing the lease does
// not close it.
func (l *Lease) Done() <-chan struct{} {
	l.expireIfDue()
	return l.done
}

// Err is why the lease was lost: an *APIError matching ErrLeaseLost (the server's answer),
// or an error matching ErrLeaseExpired (the deadline passed); nil while it is not lost.
// It compares the clock with the deadline itself: call it right before each step of the
// guarded work.
func (l *Lease) Err() error {
	l.expireIfDue()
	return l.lossErr()
}

// Held reports whether the lease is held: not lost (on the clock, now), not released.
func (l *Lease) Held() bool {
	l.expireIfDue()
	return l.holds()
}

// Deadline is the time (with a monotonic clock reading) by which the lease ends unless
// renewed, less the safety margin.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Remaining is the time left until Deadline; 0 once lost or released.
func (l *Lease) Remaining() time.Duration { return remaining(l) }

// holder is what a Lease and a LeaseSet share, for what is written once for both.
type holder interface {
	Held() bool
	Deadline() time.Time
	OnLost(f func())
	expireIfDue()
}

// remaining is the time left until h's deadline; 0 once lost or released.
func remaining(h holder) time.Duration {
	if !h.Held() {
		return 0
	}
	if left := time.Until(h.Deadline()); left > 0 {
		return left
	}
	return 0
}

// Renewals is how many renewals succeeded.
func (l *Lease) Renewals() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewals
}

// LastErr is the last failed renewal's error (nil after a success).
func (l *Lease) LastErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr
}

// OnLost calls f (from the goroutine that detects it) right after the lease is lost;
// at once if it is lost already.
func (l *Lease) OnLost(f func()) {
	l.expireIfDue()
	l.addOnLost(f)
}

func (l *Lease) String() string {
	state := ""
	if !l.Held() {
		state = " (not held)"
	}
	return fmt.Sprintf("lease on %s, fencing token %d%s", l.resource, l.token, state)
}

// expireIfDue declares the lease lost if its deadline has passed.
func (l *Lease) expireIfDue() {
	run(l.expire())
}

func run(callbacks []func()) {
	for _, f := range callbacks {
		f()
	}
}

// expire declares the lease lost if its deadline has passed; it returns the callbacks to
// call then.
func (l *Lease) expire() []func() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost || l.stopped || time.Now().Before(l.deadline) {
		return nil
	}
	var why string
	switch {
	case l.lastErr != nil:
		why = fmt.Sprintf("last error: %v", l.lastErr)
	case !l.inflight.IsZero():
		why = fmt.Sprintf("a renewal sent %.1f s before had no answer yet", time.Since(l.inflight).Seconds())
	default:
		why = "no renewal was tried since the last one succeeded: the process did not run in time (paused, or starved)"
	}
	return l.setLostLocked(&expiredError{msg: fmt.Sprintf(
		"lease expired: no renewal of the %s succeeded before its deadline (%s)", l.label, why)})
}

// setLostLocked marks the lease lost (l.mu is held) and returns the callbacks to call.
func (l *Lease) setLostLocked(err error) []func() {
	if l.lost || l.stopped {
		return nil
	}
	callbacks := l.loseLocked(err)
	l.stop()
	return callbacks
}

func (l *Lease) renewLoop(ctx context.Context) {
	// The callbacks of a loss it detects are called once it has ended, so that they may
	// stop or release the lease.
	var after []func()
	defer func() {
		close(l.exited)
		run(after)
	}()
	ttl := l.grant.TTL
	period := ttl / 3
	retry := ttl / 10
	if retry > time.Second {
		retry = time.Second
	}
	if retry < 20*time.Millisecond {
		retry = 20 * time.Millisecond
	}
	l.mu.Lock()
	next := l.base.Add(period)
	l.mu.Unlock()
	for {
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		l.mu.Lock()
		if l.lost || l.stopped {
			l.mu.Unlock()
			return
		}
		sent := time.Now()
		deadline := l.deadline
		if !sent.Before(deadline) {
			l.mu.Unlock()
			after = l.expire() // the deadline passed before this renewal could be sent
			return
		}
		l.inflight = sent
		l.mu.Unlock()
		timeout := l.c.timeout
		if period < timeout {
			timeout = period
		}
		if left := deadline.Sub(sent); left < timeout {
			timeout = left
		}
		g, err := l.renew(ctx, &RenewOptions{Timeout: timeout, Deadline: deadline})
		l.mu.Lock()
		l.inflight = time.Time{}
		if l.lost || l.stopped || ctx.Err() != nil {
			l.mu.Unlock()
			return // lost is final, even if this renewal crossed the deadline
		}
		if err != nil {
			if errors.Is(err, ErrLeaseLost) {
				after = l.setLostLocked(err)
				l.mu.Unlock()
				return
			}
			// Transient: tried again, on a new connection, until the deadline.
			l.lastErr = err
			l.mu.Unlock()
			next = time.Now().Add(retry)
			continue
		}
		if !time.Now().Before(l.deadline) {
			l.mu.Unlock()
			after = l.expire() // answered after the deadline: the lease is lost
			return
		}
		l.grant = *g
		l.base = sent
		l.deadline = g.Deadline.Add(-l.margin)
		l.lastErr = nil
		l.renewals++
		l.timer.Reset(time.Until(l.deadline))
		l.mu.Unlock()
		next = sent.Add(period)
	}
}

// renew sends one renewal.
func (l *Lease) renew(ctx context.Context, o *RenewOptions) (*Grant, error) {
	if l.renewFn != nil {
		return l.renewFn(ctx, o)
	}
	return l.c.Renew(ctx, l.resource, l.leaseID, o)
}

// release sends the release.
func (l *Lease) release(ctx context.Context) error {
	if l.releaseFn != nil {
		return l.releaseFn(ctx)
	}
	return l.c.Release(ctx, l.resource, l.leaseID)
}

// Stop stops renewing, without releasing, and waits for the renewer to end.
func (l *Lease) Stop() {
	l.mu.Lock()
	l.stopped = true
	stop, timer := l.stop, l.timer
	l.mu.Unlock()
	stop()
	if timer != nil {
		timer.Stop()
		<-l.exited
	}
}

// Release stops renewing and releases the lease, so that the next waiter is granted at
// once. A lease lost by a lease_lost answer is not released (it is someone else's now):
// Release returns that error. A lease lost by its deadline is still released if the
// server can be reached (nothing may have been granted since); the server's lease_lost
// answer is returned if not. A second call returns the first one's result.
func (l *Lease) Release(ctx context.Context) error {
	l.expireIfDue()
	return l.releaseOnce(func(lostErr error) error {
		l.Stop()
		if lostErr != nil && errors.Is(lostErr, ErrLeaseLost) {
			if l.releaseLost {
				_ = l.release(ctx) // lease_lost again, for the lost ones: the others are released
			}
			return lostErr
		}
		return l.release(ctx)
	})
}

// ---- a context that ends with the lease ----------------------------------------------

type leaseKey struct{}

// leaseContext is a context cancelled the moment its lease (or LeaseSet) is lost; its Err
// and Done compare the deadline with the clock first, as Lease.Err does.
type leaseContext struct {
	context.Context
	h holder
}

// holderContext is h's Context: derived from parent, and cancelled the moment h is lost.
func holderContext(parent context.Context, h holder) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	h.OnLost(cancel)
	return &leaseContext{Context: ctx, h: h}, cancel
}

func (c *leaseContext) Done() <-chan struct{} {
	c.h.expireIfDue()
	return c.Context.Done()
}

func (c *leaseContext) Err() error {
	c.h.expireIfDue()
	return c.Context.Err()
}

func (c *leaseContext) Value(key interface{}) interface{} {
	if l, ok := c.h.(*Lease); ok && key == (leaseKey{}) {
		return l
	}
	return c.Context.Value(key)
}

// Context returns a context derived from parent that is cancelled the moment the lease
// is lost (or parent ends, or cancel is called). Its Err compares the lease's deadline
// with the clock itself, so checking ctx.Err() right before each step of the work is
// enough, even after a pause. LeaseFromContext(ctx) gives the lease back.
func (l *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return holderContext(parent, l)
}

// LeaseFromContext returns the lease of a context made by Lease.Context (the context
// RunWhenLeader gives its function, or one derived from it), or nil.
func LeaseFromContext(ctx context.Context) *Lease {
	l, _ := ctx.Value(leaseKey{}).(*Lease)
	return l
}
