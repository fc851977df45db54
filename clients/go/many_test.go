package mutexd_test

// Several resources at once, against a real server: AcquireMany, RenewMany and
// ReleaseMany; LockMany, a set renewed and released with one request for all of its
// leases, and lost as a whole; LockOrdered, Curator's multi-lock.

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mutexd "github.com/mutexd/mutexd/clients/go"
)

// names is n resource names of the test's own, sharing a prefix.
func names(t testing.TB, n int) []string {
	base := name(t)
	out := make([]string, n)
	for i := range out {
		out[i] = base + "/" + string(rune('a'+i))
	}
	return out
}

// holderToken is the fencing token of resource's holder, 0 when it is free.
func holderToken(t testing.TB, c *mutexd.Client, resource string) uint64 {
	t.Helper()
	st, err := c.Get(context.Background(), resource)
	if err != nil {
		t.Fatal(err)
	}
	if st.Holder == nil {
		return 0
	}
	return st.Holder.FencingToken
}

// requests counts the requests a client sent, by method and path (the query left out).
type requests struct {
	mu sync.Mutex
	n  map[string]int
}

func countRequests(c *mutexd.Client) *requests {
	r := &requests{n: map[string]int{}}
	mutexd.OnAnswer(c, func(to, method, path string, status int, h http.Header) {
		if i := strings.IndexByte(path, '?'); i >= 0 {
			path = path[:i]
		}
		r.mu.Lock()
		r.n[method+" "+path]++
		r.mu.Unlock()
	})
	return r
}

func (r *requests) get(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[key]
}

// withSuffix is how many requests had a path ending in suffix.
func (r *requests) withSuffix(suffix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for k, v := range r.n {
		if strings.HasSuffix(k, suffix) {
			n += v
		}
	}
	return n
}

// TestAcquireManyIsAllOrNone: one name held by another owner, no wait: lease_held naming
// it and its holder, and nothing granted (the other names stay free); the same with a
// wait that runs out, and through LockMany.
func TestAcquireManyIsAllOrNone(t *testing.T) {
	s := server(t)
	c, other := newClient(t, s.URL, nil), newClient(t, s.URL, nil)
	ctx := ctxOf(t)
	rs := names(t, 3)
	held, err := other.Acquire(ctx, rs[1], &mutexd.AcquireOptions{Owner: "someone-else", TTL: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.AcquireMany(ctx, rs, &mutexd.AcquireOptions{TTL: 5 * time.Second})
	mustIs(t, err, mutexd.ErrLeaseHeld)
	e := apiError(t, err)
	if e.Resource != rs[1] || e.Holder == nil || e.Holder.Owner != "someone-else" ||
		e.Holder.FencingToken != held.FencingToken || e.RetryAfter < time.Second {
		t.Fatalf("%+v %+v", e, e.Holder)
	}
	for _, r := range []string{rs[0], rs[2]} {
		if tok := holderToken(t, other, r); tok != 0 {
			t.Fatalf("%s was granted (token %d) though %s is held", r, tok, rs[1])
		}
	}

	start := time.Now()
	_, err = c.LockMany(ctx, rs, &mutexd.LockOptions{TTL: lockTTL, Wait: 400 * time.Millisecond})
	mustIs(t, err, mutexd.ErrLeaseHeld)
	if took := time.Since(start); took < 300*time.Millisecond || took > 3*time.Second {
		t.Fatalf("the wait ran out after %v", took)
	}
	if e := apiError(t, err); e.Resource != rs[1] {
		t.Fatalf("%+v", e)
	}
	for _, r := range []string{rs[0], rs[2]} {
		st, err := other.Get(ctx, r)
		if err != nil || st.Held() || st.Waiters != 0 {
			t.Fatalf("%s after the wait ran out: %+v %v", r, st, err)
		}
	}
	if tok := holderToken(t, other, rs[1]); tok != held.FencingToken {
		t.Fatalf("the holder of %s changed: %d", rs[1], tok)
	}
}

// TestAcquireRenewReleaseMany: a granted set (one lease id, a token each, in order), its
// idempotent retry, a batch renewal, and lease_lost naming the one broken while the
// others are renewed, then released, all the same.
func TestAcquireRenewReleaseMany(t *testing.T) {
	s := server(t)
	c, other := newClient(t, s.URL, nil), newClient(t, s.URL, nil)
	ctx := ctxOf(t)
	rs := names(t, 3)
	rs[0], rs[2] = rs[2], rs[0] // not in name order: the answer keeps the order given
	gs, err := c.AcquireMany(ctx, rs, &mutexd.AcquireOptions{Owner: "me", TTL: 5 * time.Second,
		Metadata: map[string]int{"v": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 3 {
		t.Fatalf("%d grants", len(gs))
	}
	seen := map[uint64]bool{}
	for i, g := range gs {
		if g.Resource != rs[i] || g.LeaseID != gs[0].LeaseID || g.Owner != "me" || g.TTL != 5*time.Second ||
			string(g.Metadata) != `{"v":1}` || g.FencingToken == 0 || seen[g.FencingToken] {
			t.Fatalf("grant %d: %+v", i, g)
		}
		seen[g.FencingToken] = true
		if r := time.Until(g.Deadline); r < 4*time.Second || r > 5*time.Second {
			t.Fatalf("grant %d ends in %v", i, r)
		}
		if tok := holderToken(t, other, g.Resource); tok != g.FencingToken {
			t.Fatalf("%s is held by token %d, not %d", g.Resource, tok, g.FencingToken)
		}
	}
	again, err := c.AcquireMany(ctx, rs, &mutexd.AcquireOptions{Owner: "me", TTL: 5 * time.Second, LeaseID: gs[0].LeaseID})
	if err != nil {
		t.Fatal(err)
	}
	for i := range gs {
		if again[i].FencingToken != gs[i].FencingToken {
			t.Fatalf("a retry with the lease id: %+v, then %+v", gs[i], again[i])
		}
	}
	renewed, err := c.RenewMany(ctx, rs, gs[0].LeaseID, &mutexd.RenewOptions{TTL: 8 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range renewed {
		if g.Resource != rs[i] || g.FencingToken != gs[i].FencingToken || g.TTL != 8*time.Second {
			t.Fatalf("renewed %d: %+v", i, g)
		}
	}

	if _, err := other.Break(ctx, rs[1], nil); err != nil {
		t.Fatal(err)
	}
	_, err = c.RenewMany(ctx, rs, gs[0].LeaseID, nil)
	mustIs(t, err, mutexd.ErrLeaseLost)
	if e := apiError(t, err); e.Resource != rs[1] || !reflect.DeepEqual(e.Resources, []string{rs[1]}) {
		t.Fatalf("%+v", e)
	}
	for _, i := range []int{0, 2} {
		st, err := other.Get(ctx, rs[i])
		if err != nil || st.Holder == nil || st.Holder.FencingToken != gs[i].FencingToken {
			t.Fatalf("%s: %+v %v", rs[i], st, err)
		}
	}
	err = c.ReleaseMany(ctx, rs, gs[0].LeaseID)
	mustIs(t, err, mutexd.ErrLeaseLost)
	if e := apiError(t, err); !reflect.DeepEqual(e.Resources, []string{rs[1]}) {
		t.Fatalf("%+v", e)
	}
	for _, r := range rs {
		if tok := holderToken(t, other, r); tok != 0 {
			t.Fatalf("%s is still held (token %d)", r, tok)
		}
	}
	err = c.ReleaseMany(ctx, rs, gs[0].LeaseID)
	if e := apiError(t, err); !reflect.DeepEqual(e.Resources, rs) {
		t.Fatalf("released twice: %+v", e)
	}
}

// TestLockManyRenewsTheSetInTheBackground: a set outlives several TTLs, renewed with one
// request for all of its leases, every lease keeping its token; Release frees them all
// with one request.
func TestLockManyRenewsTheSetInTheBackground(t *testing.T) {
	s := server(t)
	c, other := newClient(t, s.URL, nil), newClient(t, s.URL, nil)
	sent := countRequests(c)
	ctx := ctxOf(t)
	rs := names(t, 3)
	const ttl = time.Second // a renewal every third of a second
	set, err := c.LockMany(ctx, rs, &mutexd.LockOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(set.Resources(), rs) || len(set.LeaseID()) != 36 || len(set.Grants()) != 3 {
		t.Fatalf("%v %q %+v", set, set.LeaseID(), set.Grants())
	}
	tokens := map[string]uint64{}
	for i, g := range set.Grants() {
		if g.Resource != rs[i] || g.LeaseID != set.LeaseID() || set.Token(rs[i]) != g.FencingToken || g.FencingToken == 0 {
			t.Fatalf("%d: %+v, token %d", i, g, set.Token(rs[i]))
		}
		tokens[rs[i]] = g.FencingToken
	}
	if set.Token("tests/not-of-the-set") != 0 {
		t.Fatal("a token for a resource not of the set")
	}
	heldFor(t, set, ttl, func(elapsed time.Duration) {
		for _, r := range rs {
			if tok := holderToken(t, other, r); tok != tokens[r] {
				t.Fatalf("%v after the lock, %s is held by token %d, not %d", elapsed, r, tok, tokens[r])
			}
		}
	})
	if n := sent.get("POST /v1/renew"); n < set.Renewals() {
		t.Fatalf("%d batch renewals for %d renewals", n, set.Renewals())
	}
	if n := sent.withSuffix("/renew") - sent.get("POST /v1/renew"); n != 0 {
		t.Fatalf("%d renewals of a single resource", n)
	}
	for i, g := range set.Grants() {
		if g.FencingToken != tokens[rs[i]] || g.RenewedAt.IsZero() {
			t.Fatalf("a renewal changed %+v", g)
		}
	}
	_, err = other.AcquireMany(ctx, []string{rs[2], rs[0]}, nil)
	mustIs(t, err, mutexd.ErrLeaseHeld)
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if sent.get("POST /v1/release") != 1 || sent.withSuffix("/release") != 1 {
		t.Fatalf("released with %v", sent.n)
	}
	for _, r := range rs {
		if tok := holderToken(t, other, r); tok != 0 {
			t.Fatalf("%s not released", r)
		}
	}
	releasedTwice(t, ctx, set)
}

// TestLockManyIsLostWhenOneLeaseIsBroken: breaking one lease of the set loses the whole
// set at its next renewal (Done, Err naming the resource, the context, OnLost); its
// Release gives back the leases it still holds and leaves the broken one's new holder alone.
func TestLockManyIsLostWhenOneLeaseIsBroken(t *testing.T) {
	s := server(t)
	c, other := newClient(t, s.URL, nil), newClient(t, s.URL, nil)
	ctx := ctxOf(t)
	rs := names(t, 3)
	set, err := c.LockMany(ctx, rs, &mutexd.LockOptions{TTL: lockTTL})
	if err != nil {
		t.Fatal(err)
	}
	lost := make(chan struct{})
	set.OnLost(func() { close(lost) })
	setCtx, cancel := set.Context(ctx)
	defer cancel()
	lostWhenBroken(t, ctx, other, rs[1], set)
	if e := apiError(t, set.Err()); !reflect.DeepEqual(e.Resources, []string{rs[1]}) {
		t.Fatalf("%+v", e)
	}
	select {
	case <-lost:
	case <-time.After(time.Second):
		t.Fatal("OnLost was not called")
	}
	select {
	case <-setCtx.Done():
	case <-time.After(time.Second):
		t.Fatal("the set's context was not cancelled")
	}
	theirs, err := other.Acquire(ctx, rs[1], &mutexd.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	mustIs(t, set.Release(ctx), mutexd.ErrLeaseLost)
	if tok := holderToken(t, other, rs[1]); tok != theirs.FencingToken {
		t.Fatalf("the new holder of %s lost its lease: %d", rs[1], tok)
	}
	for _, r := range []string{rs[0], rs[2]} {
		if tok := holderToken(t, other, r); tok != 0 {
			t.Fatalf("%s, still held by the lost set, was not released", r)
		}
	}
}

// TestLockManyIsLostAtItsDeadlineWhenTheServerDies: renewals of the set that fail until
// the deadline lose it (ErrLeaseExpired), not before.
func TestLockManyIsLostAtItsDeadlineWhenTheServerDies(t *testing.T) {
	s := server(t)
	c := newClient(t, s.URL, &mutexd.Options{Timeout: 2 * time.Second})
	ctx := ctxOf(t)
	set, err := c.LockMany(ctx, names(t, 2), &mutexd.LockOptions{TTL: lockTTL})
	if err != nil {
		t.Fatal(err)
	}
	lostAtItsDeadline(t, s, set)
	if !strings.Contains(set.Err().Error(), "leases on ") {
		t.Fatalf("the loss does not name the set: %v", set.Err())
	}
}

// TestLockManyWaitsForEveryResource: a set waiting for one held resource is granted once
// it is released, every lease at once.
func TestLockManyWaitsForEveryResource(t *testing.T) {
	s := server(t)
	c, other := newClient(t, s.URL, nil), newClient(t, s.URL, nil)
	ctx := ctxOf(t)
	rs := names(t, 2)
	first, err := other.Lock(ctx, rs[1], &mutexd.LockOptions{TTL: lockTTL})
	if err != nil {
		t.Fatal(err)
	}
	set := grantedOnRelease(t, ctx, first, func() (held, error) {
		return c.LockMany(ctx, rs, &mutexd.LockOptions{TTL: lockTTL, Wait: 10 * time.Second})
	}).(*mutexd.LeaseSet)
	if set.Token(rs[1]) <= first.Token() {
		t.Fatal("the token did not grow")
	}
	for _, r := range rs {
		if tok := holderToken(t, other, r); tok != set.Token(r) {
			t.Fatalf("%s is held by %d", r, tok)
		}
	}
}

// TestLockOrderedTakesThemOneByOneInNameOrder: the ordered helper takes a lease of its own
// on each resource, in sorted order, renews each, and is lost as a whole when one is
// broken; Release gives back the others.
func TestLockOrderedTakesThemOneByOneInNameOrder(t *testing.T) {
	s := server(t)
	c, other := newClient(t, s.URL, nil), newClient(t, s.URL, nil)
	sent := countRequests(c)
	ctx := ctxOf(t)
	rs := names(t, 3)
	given := []string{rs[2], rs[0], rs[1]}
	set, err := c.LockOrdered(ctx, given, &mutexd.LockOptions{TTL: lockTTL})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(set.Resources(), rs) || set.LeaseID() != "" {
		t.Fatalf("%v %q", set.Resources(), set.LeaseID())
	}
	gs := set.Grants()
	for i, g := range gs {
		if g.Resource != rs[i] || set.Token(rs[i]) != g.FencingToken || holderToken(t, other, rs[i]) != g.FencingToken {
			t.Fatalf("%d: %+v", i, g)
		}
		if i > 0 && (g.FencingToken <= gs[i-1].FencingToken || g.LeaseID == gs[i-1].LeaseID) {
			t.Fatalf("not taken one by one in name order: %+v then %+v", gs[i-1], g)
		}
	}
	if n := sent.get("POST /v1/acquire"); n != 0 {
		t.Fatalf("%d requests about several resources", n)
	}
	within(t, 3*time.Second, "two renewals of each", func() bool { return set.Renewals() >= 2 })
	for _, r := range rs {
		if tok := holderToken(t, other, r); tok != set.Token(r) {
			t.Fatalf("%s is held by %d", r, tok)
		}
	}
	if !set.Held() || set.Err() != nil {
		t.Fatal(set.Err())
	}
	if _, err := other.Break(ctx, rs[1], nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-set.Done():
	case <-time.After(lockTTL/3 + 700*time.Millisecond):
		t.Fatal("Done did not close")
	}
	mustIs(t, set.Err(), mutexd.ErrLeaseLost)
	if set.Held() {
		t.Fatal("still held")
	}
	mustIs(t, set.Release(ctx), mutexd.ErrLeaseLost)
	for _, r := range rs {
		if tok := holderToken(t, other, r); tok != 0 {
			t.Fatalf("%s still held (%d)", r, tok)
		}
	}
}

// TestLockOrderedReleasesWhatItTookWhenOneFails: the third name (in order) is held: the
// two taken before it are released, the last taken first, the fourth is never taken, and
// the error names the one held.
func TestLockOrderedReleasesWhatItTookWhenOneFails(t *testing.T) {
	s := server(t)
	c, other := newClient(t, s.URL, nil), newClient(t, s.URL, nil)
	ctx := ctxOf(t)
	rs := names(t, 4)
	held, err := other.Acquire(ctx, rs[2], &mutexd.AcquireOptions{TTL: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	page, err := other.Events(ctx, &mutexd.EventsOptions{Prefix: rs[0][:len(rs[0])-1], Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	after := page.Next
	start := time.Now()
	_, err = c.LockOrdered(ctx, []string{rs[3], rs[2], rs[1], rs[0]}, &mutexd.LockOptions{TTL: 10 * time.Second, Wait: 500 * time.Millisecond})
	mustIs(t, err, mutexd.ErrLeaseHeld)
	if took := time.Since(start); took < 400*time.Millisecond || took > 3*time.Second {
		t.Fatalf("the wait ran out after %v", took)
	}
	if e := apiError(t, err); e.Resource != rs[2] || e.Holder == nil || e.Holder.FencingToken != held.FencingToken {
		t.Fatalf("%+v", e)
	}
	for _, r := range []string{rs[0], rs[1], rs[3]} {
		if tok := holderToken(t, other, r); tok != 0 {
			t.Fatalf("%s is still held (%d)", r, tok)
		}
	}
	page, err = other.Events(ctx, &mutexd.EventsOptions{After: after, Prefix: rs[0][:len(rs[0])-1], Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range page.Events {
		if e.Type != "renewed" { // a renewal may come between, as the machine goes
			got = append(got, e.Type+" "+e.Resource[len(e.Resource)-1:])
		}
	}
	want := []string{"granted a", "granted b", "released b", "released a"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}

// TestLockOrderedRefusesANameTwice: a name given twice is refused before any request.
func TestLockOrderedRefusesANameTwice(t *testing.T) {
	c := newClient(t, deadURL(t), nil)
	rs := names(t, 2)
	if _, err := c.LockOrdered(ctxOf(t), []string{rs[0], rs[1], rs[0]}, nil); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatal(err)
	}
	if _, err := c.LockOrdered(ctxOf(t), nil, nil); err == nil {
		t.Fatal("no name")
	}
	if _, err := c.AcquireMany(ctxOf(t), []string{rs[0], ""}, nil); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatal(err)
	}
}

// TestSeveralResourcesGoStraightToThePartitionsOwner: on a partitioned group (three real
// servers of 16 partitions on Azurite), AcquireMany, RenewMany, ReleaseMany and a
// LockMany's renewals of hash-tagged names go straight to the owner of their partition,
// and no server forwards one; names of different partitions are refused
// (partitions_differ), and LockOrdered takes them.
func TestSeveralResourcesGoStraightToThePartitionsOwner(t *testing.T) {
	group := startGroup(t, 3, "--partitions", strconv.Itoa(partitions))
	owners := settledMap(t, group, 60*time.Second)
	c := newClient(t, urlsOf(group), &mutexd.Options{Timeout: 10 * time.Second})
	var mu sync.Mutex
	var many, astray []string
	mutexd.OnAnswer(c, func(to, method, path string, status int, h http.Header) {
		if path != "/v1/acquire" && path != "/v1/renew" && path != "/v1/release" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		line := fmt.Sprintf("%s %s sent to %s, %d served by %q, partition %q", method, path, to, status,
			h.Get("Mutexd-Served-By"), h.Get("Mutexd-Partition"))
		many = append(many, line)
		if h.Get("Mutexd-Served-By") != to {
			astray = append(astray, line)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if _, err := c.Get(ctx, name(t)); err != nil {
		t.Fatal(err)
	}
	learned(t, c, owners)

	// Two accounts in one partition, whose owner is not the server the client asks first.
	var rs []string
	var p int
	for i := 0; ; i++ {
		tag := fmt.Sprintf("{%s-%d}", strings.TrimPrefix(name(t), "tests/"), i)
		p = mutexd.PartitionOf(tag, partitions)
		if owners[p] != group[0] {
			rs = []string{tag + "/alice", tag + "/bob"}
			break
		}
	}
	// Before each request, one about a name of another server's: the server asked first
	// (the one that answered last) is then not the owner.
	var elsewhere string
	for _, ns := range namesIn(t, 1) {
		if owners[mutexd.PartitionOf(ns[0], partitions)] != owners[p] {
			elsewhere = ns[0]
			break
		}
	}
	away := func() {
		t.Helper()
		if _, err := c.Get(ctx, elsewhere); err != nil {
			t.Fatal(err)
		}
		if c.URL() == owners[p].URL {
			t.Fatalf("the client asks %s first", c.URL())
		}
	}
	before := forwarded(t, group)
	away()
	gs, err := c.AcquireMany(ctx, rs, &mutexd.AcquireOptions{TTL: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	away()
	if _, err := c.RenewMany(ctx, rs, gs[0].LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		st, err := c.Get(ctx, r)
		if err != nil || st.Holder == nil || st.Holder.FencingToken != gs[i].FencingToken {
			t.Fatalf("%s: %+v %v", r, st, err)
		}
	}
	away()
	if err := c.ReleaseMany(ctx, rs, gs[0].LeaseID); err != nil {
		t.Fatal(err)
	}
	away()
	set, err := c.LockMany(ctx, rs, &mutexd.LockOptions{TTL: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// While the set is held its renewal, on a goroutine of its own, may answer between a
	// request and a look at the client's first server: the look is left out.
	awayUnchecked := func() {
		t.Helper()
		if _, err := c.Get(ctx, elsewhere); err != nil {
			t.Fatal(err)
		}
	}
	within(t, 10*time.Second, "two renewals of the set", func() bool {
		awayUnchecked()
		return set.Renewals() >= 2
	})
	awayUnchecked()
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(many) < 6 || len(astray) > 0 {
		t.Fatalf("%d requests about several resources, %d not served where sent: %q", len(many), len(astray), astray)
	}
	for _, line := range many {
		if !strings.Contains(line, "sent to "+owners[p].URL+",") || !strings.HasSuffix(line, fmt.Sprintf("partition %q", strconv.Itoa(p))) {
			t.Fatalf("not sent to the owner of partition %d (%s): %s", p, owners[p].URL, line)
		}
	}
	mu.Unlock()
	if after := forwarded(t, group); after != before {
		t.Fatalf("the servers forwarded %d requests", after-before)
	}

	// Names of two partitions: refused by AcquireMany, taken by LockOrdered.
	byPartition := namesIn(t, 1)
	apart := []string{byPartition[5][0], byPartition[11][0]}
	_, err = c.AcquireMany(ctx, apart, nil)
	mustIs(t, err, mutexd.ErrInvalidRequest)
	if e := apiError(t, err); e.Field != "resources" || e.Reason != "partitions_differ" {
		t.Fatalf("%+v", e)
	}
	ordered, err := c.LockOrdered(ctx, apart, &mutexd.LockOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range apart {
		st, err := c.Get(ctx, r)
		if err != nil || st.Holder == nil || st.Holder.FencingToken != ordered.Token(r) {
			t.Fatalf("%s: %+v %v", r, st, err)
		}
	}
	if err := ordered.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
