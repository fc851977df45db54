package mutexd

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// LeaseSet is leases on several resources, held together and kept alive in the background
// until Release (LockMany, LockOrdered). It is lost as a whole: the moment any one of its
// leases is lost, Done is closed and Err says why, as for a Lease. Its methods may be
// called from any goroutine.
//
// Each resource's lease has its own fencing token (Token): pass each resource's token to
// what that resource guards.
type LeaseSet struct {
	c       *Client
	names   []string // in the order given (LockMany) or taken (LockOrdered)
	tokens  []uint64 // never change
	leaseID string   // the lease id every lease shares (LockMany); "" for LockOrdered

	// LockMany: one lease renewed and released for the whole set with one request.
	core   *Lease
	gmu    sync.Mutex
	grants []Grant // the last answers

	// LockOrdered: a lease of its own per resource.
	parts []*Lease
	holding
}

// LockMany acquires a lease on every one of resources (2 to 64 names, each once), all at
// once or none, with one request (AcquireMany), and keeps them alive in the background as
// a set until Release: one request renews the whole set every third of the TTL, and one
// releases it.
//
// opts are Lock's, and apply to each lease; Wait is how long the request may wait in the
// queue of every resource (it is granted all at once, when it heads each: no deadlock,
// whatever the order of the names in concurrent requests). When the wait runs out, or at
// once without one, a held resource is ErrLeaseHeld, whose APIError.Resource names the
// first held in the order given; nothing is granted then.
//
// The set is lost the moment a renewal of the set is answered lease_lost (any one of its
// leases was broken, or taken by another after it expired: Err's APIError.Resources names
// which), or when no renewal of the set succeeded before its deadline (ErrLeaseExpired):
// as Lock's lease, and with its deadline the earliest of the leases'.
//
// On a partitioned group every name must be in one partition (a hash tag: "{acct}/alice",
// "{acct}/bob"), else ErrInvalidRequest; for names of different partitions, LockOrdered.
// When the acquire got no usable answer, the proposed leases are released, best effort,
// before the error is returned.
func (c *Client) LockMany(ctx context.Context, resources []string, opts *LockOptions) (*LeaseSet, error) {
	gs, err := c.lock(ctx, resources, true, opts)
	if err != nil {
		return nil, err
	}
	return c.holdMany(gs), nil
}

// holdMany keeps the granted leases of one lease id alive as a set.
func (c *Client) holdMany(gs []*Grant) *LeaseSet {
	s := &LeaseSet{c: c, leaseID: gs[0].LeaseID}
	for _, g := range gs {
		s.names = append(s.names, g.Resource)
		s.tokens = append(s.tokens, g.FencingToken)
		s.grants = append(s.grants, *g)
	}
	core := newLease(c, combined(gs))
	core.label = "leases on " + strings.Join(s.names, ", ")
	core.renewFn = func(ctx context.Context, o *RenewOptions) (*Grant, error) {
		gs, err := c.RenewMany(ctx, s.names, s.leaseID, o)
		if err != nil {
			return nil, err
		}
		s.gmu.Lock()
		for i, g := range gs {
			s.grants[i] = *g
		}
		s.gmu.Unlock()
		return combined(gs), nil
	}
	core.releaseFn = func(ctx context.Context) error { return c.ReleaseMany(ctx, s.names, s.leaseID) }
	core.releaseLost = true
	s.core = core
	core.start()
	return s
}

// combined is what the set's renewer goes by: the lease that ends first, with the
// shortest TTL of the set (they are all the same TTL, asked for together).
func combined(gs []*Grant) *Grant {
	first, ttl := *gs[0], gs[0].TTL
	for _, g := range gs[1:] {
		if g.Deadline.Before(first.Deadline) {
			first = *g
		}
		if g.TTL < ttl {
			ttl = g.TTL
		}
	}
	first.TTL = ttl
	return &first
}

// LockOrdered takes a lease on every one of resources, in any partitions, and keeps each
// alive in the background until Release: Curator's InterProcessMultiLock. It takes them
// one by one with Lock, in sorted name order (so that two processes taking overlapping
// sets never wait on each other in a circle), all within opts.Wait (the wait left is
// given to each; once it has run out, each is still tried once, without waiting). When
// one fails (ErrLeaseHeld when the wait ran out, or any other error), the leases already
// taken are released, the last taken first, and that error is returned (an *APIError's
// Resource names the resource that failed).
//
// Each lease is renewed on its own (opts are Lock's, and apply to each); the set is lost
// the moment any one of them is lost: Done is closed and Err is that lease's error.
// Release releases every lease, the last taken first.
//
// Unlike LockMany the leases are not granted at once: while it waits for one resource it
// holds those before it in order. Prefer LockMany for names of one partition (or on a lone
// server).
func (c *Client) LockOrdered(ctx context.Context, resources []string, opts *LockOptions) (*LeaseSet, error) {
	var o LockOptions
	if opts != nil {
		o = *opts
	}
	if err := checkNames(resources); err != nil {
		return nil, err
	}
	if o.Wait < 0 {
		return nil, durationError("Wait")
	}
	names := append([]string(nil), resources...)
	sort.Strings(names)
	for i := 1; i < len(names); i++ {
		if names[i] == names[i-1] {
			return nil, fmt.Errorf("mutexd: %q is named twice", names[i])
		}
	}
	end := time.Now().Add(o.Wait)
	parts := make([]*Lease, 0, len(names))
	giveBack := func() {
		for i := len(parts) - 1; i >= 0; i-- {
			c.quietly(parts[i].Release)
		}
	}
	for _, name := range names {
		each := o
		if o.Wait > 0 {
			each.Wait = time.Until(end)
			if each.Wait < time.Millisecond {
				each.Wait = 0
			}
		}
		l, err := c.Lock(ctx, name, &each)
		if err != nil {
			giveBack()
			var e *APIError
			if errors.As(err, &e) && e.Resource == "" {
				e.Resource = name
			}
			return nil, err
		}
		parts = append(parts, l)
	}
	// One lost while the next were taken: the set is of no use.
	for _, l := range parts {
		if err := l.Err(); err != nil {
			giveBack()
			return nil, err
		}
	}
	s := &LeaseSet{c: c, names: names, parts: parts, holding: holding{done: make(chan struct{})}}
	for _, l := range parts {
		l := l
		s.tokens = append(s.tokens, l.Token())
		l.OnLost(func() { s.partLost(l) })
	}
	return s, nil
}

// partLost marks an ordered set lost by the loss of one of its leases.
func (s *LeaseSet) partLost(l *Lease) {
	err := l.Err()
	s.mu.Lock()
	if s.lost || s.released {
		s.mu.Unlock()
		return
	}
	callbacks := s.loseLocked(err)
	s.mu.Unlock()
	run(callbacks)
}

// leases is what the set renews: the one lease of LockMany's (its core), or each of
// LockOrdered's, in the order taken.
func (s *LeaseSet) leases() []*Lease {
	if s.core != nil {
		return []*Lease{s.core}
	}
	return s.parts
}

// expireIfDue declares the set lost if a deadline has passed.
func (s *LeaseSet) expireIfDue() {
	for _, l := range s.leases() {
		l.expireIfDue()
	}
}

// Resources is the set's resources: in the order given (LockMany), or in the order taken,
// sorted (LockOrdered).
func (s *LeaseSet) Resources() []string { return append([]string(nil), s.names...) }

// Token is the fencing token of the lease on resource (a renewal keeps it); 0 for a
// resource that is not of the set. Pass it to what that resource guards.
func (s *LeaseSet) Token(resource string) uint64 {
	for i, n := range s.names {
		if n == resource {
			return s.tokens[i]
		}
	}
	return 0
}

// LeaseID is the lease id every lease of a LockMany set shares (the credential that
// renews and releases them); "" for a LockOrdered set, whose leases have one each (Grants).
func (s *LeaseSet) LeaseID() string { return s.leaseID }

// Grants is each lease as the last successful acquire or renewal answered it, in the
// order of Resources.
func (s *LeaseSet) Grants() []Grant {
	if s.core != nil {
		s.gmu.Lock()
		defer s.gmu.Unlock()
		return append([]Grant(nil), s.grants...)
	}
	out := make([]Grant, len(s.parts))
	for i, l := range s.parts {
		out[i] = l.Grant()
	}
	return out
}

// Done is closed the moment the set is lost: any one of its leases (Err says why).
// Releasing the set does not close it.
func (s *LeaseSet) Done() <-chan struct{} {
	if s.core != nil {
		return s.core.Done()
	}
	s.expireIfDue()
	return s.done
}

// Err is why the set was lost (an *APIError matching ErrLeaseLost, or an error matching
// ErrLeaseExpired), nil while it is not. It compares the clock with the deadlines itself:
// call it right before each step of the guarded work.
func (s *LeaseSet) Err() error {
	if s.core != nil {
		return s.core.Err()
	}
	s.expireIfDue()
	return s.lossErr()
}

// Held reports whether every lease of the set is held: the set is not lost (on the clock,
// now), and not released.
func (s *LeaseSet) Held() bool {
	if s.core != nil {
		return s.core.Held()
	}
	s.expireIfDue()
	return s.holds()
}

// Deadline is the earliest deadline of the leases (less the safety margin).
func (s *LeaseSet) Deadline() time.Time {
	ls := s.leases()
	d := ls[0].Deadline()
	for _, l := range ls[1:] {
		if x := l.Deadline(); x.Before(d) {
			d = x
		}
	}
	return d
}

// Remaining is the time left until Deadline; 0 once lost or released.
func (s *LeaseSet) Remaining() time.Duration { return remaining(s) }

// Renewals is how many renewals of the set succeeded (LockOrdered: the fewest of its
// leases').
func (s *LeaseSet) Renewals() int {
	ls := s.leases()
	n := ls[0].Renewals()
	for _, l := range ls[1:] {
		if x := l.Renewals(); x < n {
			n = x
		}
	}
	return n
}

// LastErr is the last failed renewal's error (nil after a success; LockOrdered: the first
// lease's, in the order taken, that has one).
func (s *LeaseSet) LastErr() error {
	for _, l := range s.leases() {
		if err := l.LastErr(); err != nil {
			return err
		}
	}
	return nil
}

// OnLost calls f (from the goroutine that detects it) right after the set is lost; at
// once if it is lost already.
func (s *LeaseSet) OnLost(f func()) {
	if s.core != nil {
		s.core.OnLost(f)
		return
	}
	s.expireIfDue()
	s.addOnLost(f)
}

// Context returns a context derived from parent that is cancelled the moment the set is
// lost (or parent ends, or cancel is called); its Err compares the deadlines with the
// clock itself.
func (s *LeaseSet) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return holderContext(parent, s)
}

// Stop stops renewing, without releasing, and waits for the renewers to end.
func (s *LeaseSet) Stop() {
	for _, l := range s.leases() {
		l.Stop()
	}
}

// Release stops renewing and releases the leases, so that the next waiters are granted
// at once. A LockMany set is released with one request; when it was lost by a lease_lost
// answer, the leases it still holds are released all the same and that answer is
// returned. A LockOrdered set releases each lease, the last taken first, as Lease.Release
// does, and returns the first error. A second call returns the first one's result.
func (s *LeaseSet) Release(ctx context.Context) error {
	if s.core != nil {
		return s.core.Release(ctx)
	}
	return s.releaseOnce(func(error) error {
		var first error
		for i := len(s.parts) - 1; i >= 0; i-- {
			if err := s.parts[i].Release(ctx); err != nil && first == nil {
				first = err
			}
		}
		return first
	})
}

func (s *LeaseSet) String() string {
	var b strings.Builder
	b.WriteString("leases on ")
	for i, n := range s.names {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (fencing token %d)", n, s.tokens[i])
	}
	if !s.Held() {
		b.WriteString(" (not held)")
	}
	return b.String()
}
