package mutexd_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mutexd "github.com/mutexd/mutexd/clients/go"
	"github.com/mutexd/mutexd/clients/go/internal/testserver"
)

// newClient is a client of url, closed at the end of the test.
func newClient(t testing.TB, url string, opts *mutexd.Options) *mutexd.Client {
	t.Helper()
	if opts == nil {
		opts = &mutexd.Options{Timeout: 5 * time.Second}
	}
	c, err := mutexd.New(url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// name is a resource name of the test's own.
func name(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "tests/" + hex.EncodeToString(b[:])
}

func ctxOf(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// apiError is err as an *APIError, failing the test if it is not one.
func apiError(t testing.TB, err error) *mutexd.APIError {
	t.Helper()
	var e *mutexd.APIError
	if !errors.As(err, &e) {
		t.Fatalf("want an *APIError, got %T %v", err, err)
	}
	return e
}

func mustIs(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("want an error matching %v, got %T %v", target, err, err)
	}
}

// deadURL is a loopback URL where nothing listens.
func deadURL(t testing.TB) string {
	return "http://127.0.0.1:" + strconv.Itoa(testserver.FreePort(t))
}

// standIn is an HTTP server on loopback that answers each request with answer, counting them.
type standIn struct {
	URL  string
	hits int64
	srv  *http.Server
}

func newStandIn(t testing.TB, answer http.HandlerFunc) *standIn {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &standIn{URL: "http://" + l.Addr().String()}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		atomic.AddInt64(&s.hits, 1)
		answer(w, r)
	})}
	go func() { _ = s.srv.Serve(l) }()
	t.Cleanup(func() { _ = s.srv.Close() })
	return s
}

func (s *standIn) Hits() int64 { return atomic.LoadInt64(&s.hits) }

func unavailable(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(503)
	_, _ = w.Write([]byte(`{"error":{"code":"unavailable","message":"no active server","reason":"no_active_server"}}`))
}

// silent accepts connections and never answers; it records when each was accepted and
// when the client closed it.
type silent struct {
	URL      string
	l        net.Listener
	mu       sync.Mutex
	accepted []time.Time
	closed   []time.Time
}

func newSilent(t testing.TB) *silent {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &silent{URL: "http://" + l.Addr().String(), l: l}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.accepted = append(s.accepted, time.Now())
			s.mu.Unlock()
			go func() {
				buf := make([]byte, 65536)
				for {
					if _, err := conn.Read(buf); err != nil {
						break
					}
				}
				conn.Close()
				s.mu.Lock()
				s.closed = append(s.closed, time.Now())
				s.mu.Unlock()
			}()
		}
	}()
	t.Cleanup(func() { l.Close() })
	return s
}

func (s *silent) times() (accepted, closed []time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.accepted...), append([]time.Time(nil), s.closed...)
}

// within fails the test unless cond becomes true within d.
// attemptsWithin: the silent servers q saw at least one attempt, none begun at or after
// deadline, none left open, and none lasting past it (beyond scheduling slack).
func attemptsWithin(t testing.TB, q []*silent, deadline time.Time) {
	t.Helper()
	n := 0
	for _, x := range q {
		accepted, closed := x.times()
		n += len(accepted)
		for _, a := range accepted {
			if !a.Before(deadline) {
				t.Fatalf("an attempt started %v after the deadline", a.Sub(deadline))
			}
		}
		if len(closed) != len(accepted) {
			t.Fatal("a connection was left open")
		}
		for _, cl := range closed {
			if cl.After(deadline.Add(150 * time.Millisecond)) {
				t.Fatalf("an attempt lasted %v past the deadline", cl.Sub(deadline))
			}
		}
	}
	if n == 0 {
		t.Fatal("nothing was tried")
	}
}

func within(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// server is a server of the test's own (one starts in a few tens of milliseconds).
func server(t testing.TB, args ...string) *testserver.Server {
	t.Helper()
	return testserver.Start(t, args...)
}

// held is what a *mutexd.Lease and a *mutexd.LeaseSet share, for the checks of a lock
// written once for both.
type held interface {
	Done() <-chan struct{}
	Err() error
	Held() bool
	Deadline() time.Time
	Remaining() time.Duration
	Renewals() int
	LastErr() error
	Release(ctx context.Context) error
}

// heldFor checks h every quarter of a second for four TTLs: held, not lost, with at most
// a TTL left, and check (given the time since the start); then that it was renewed.
func heldFor(t testing.TB, h held, ttl time.Duration, check func(elapsed time.Duration)) {
	t.Helper()
	start := time.Now()
	for time.Since(start) < 4*ttl {
		time.Sleep(250 * time.Millisecond)
		if !h.Held() || h.Err() != nil {
			t.Fatalf("lost: %v", h.Err())
		}
		if r := h.Remaining(); r <= 0 || r > ttl {
			t.Fatalf("remaining %v", r)
		}
		select {
		case <-h.Done():
			t.Fatal("done")
		default:
		}
		check(time.Since(start))
	}
	if n := h.Renewals(); n < 9 {
		t.Fatalf("%d renewals in %v", n, 4*ttl)
	}
}

// releasedTwice checks h once released: neither held nor lost, and a second Release
// returns the first one's result (nil).
func releasedTwice(t testing.TB, ctx context.Context, h held) {
	t.Helper()
	if h.Held() || h.Err() != nil || h.Remaining() != 0 {
		t.Fatal("released, it is neither held nor lost")
	}
	if err := h.Release(ctx); err != nil {
		t.Fatalf("a second release: %v", err)
	}
}

// grantedOnRelease has first released in 0.6 s and checks that lock, waiting for it, is
// granted then, with a deadline counted from the grant, not from the request sent before
// the wait. It returns what lock took, released at the end of the test.
func grantedOnRelease(t testing.TB, ctx context.Context, first *mutexd.Lease, lock func() (held, error)) held {
	t.Helper()
	go func() {
		time.Sleep(600 * time.Millisecond)
		_ = first.Release(context.Background())
	}()
	start := time.Now()
	h, err := lock()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Release(ctx) })
	if took := time.Since(start); took < 400*time.Millisecond || took > 3*time.Second {
		t.Fatalf("granted after %v", took)
	}
	if r := h.Remaining(); r < lockTTL-300*time.Millisecond {
		t.Fatalf("remaining %v", r)
	}
	return h
}

// lostWhenBroken breaks the lease on resource, one of h's (of lockTTL), and checks that h
// is lost by lease_lost at its next renewal, at most a third of the TTL away.
func lostWhenBroken(t testing.TB, ctx context.Context, other *mutexd.Client, resource string, h held) {
	t.Helper()
	time.Sleep(200 * time.Millisecond)
	if broken, err := other.Break(ctx, resource, &mutexd.BreakOptions{Reason: "test"}); err != nil || !broken {
		t.Fatal(broken, err)
	}
	brokenAt := time.Now()
	select {
	case <-h.Done():
	case <-time.After(lockTTL/3 + 700*time.Millisecond):
		t.Fatal("Done did not close")
	}
	if took := time.Since(brokenAt); took > lockTTL/3+700*time.Millisecond {
		t.Fatalf("after %v", took)
	}
	mustIs(t, h.Err(), mutexd.ErrLeaseLost)
	if h.Held() || h.Remaining() != 0 {
		t.Fatal("still held")
	}
}

// lostAtItsDeadline kills s once h (of lockTTL) was renewed, and checks that h, whose
// renewals then fail (refused) and are tried again until its deadline, counted from the
// last successful renewal on the monotonic clock, is lost then and not before: by
// ErrLeaseExpired, the last error a transport error.
func lostAtItsDeadline(t testing.TB, s *testserver.Server, h held) {
	t.Helper()
	within(t, 2*time.Second, "a renewal", func() bool { return h.Renewals() >= 1 })
	deadline := h.Deadline()
	s.Kill()
	if time.Until(deadline) > lockTTL {
		t.Fatal("the deadline is past the TTL")
	}
	select {
	case <-h.Done():
		t.Fatalf("lost %v before the deadline: %v", time.Until(deadline), h.Err())
	case <-time.After(time.Until(deadline) - 150*time.Millisecond):
	}
	select {
	case <-h.Done():
	case <-time.After(lockTTL):
		t.Fatal("Done did not close")
	}
	if late := time.Since(deadline); late < 0 || late > 500*time.Millisecond {
		t.Fatalf("lost %v after the deadline", late)
	}
	mustIs(t, h.Err(), mutexd.ErrLeaseExpired)
	mustIs(t, h.LastErr(), mutexd.ErrTransport)
}
