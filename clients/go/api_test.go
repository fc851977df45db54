package mutexd_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mutexd "github.com/mutexd/mutexd/clients/go"
)

func TestAcquireRenewReleaseRoundTrip(t *testing.T) {
	s := server(t)
	c, other := newClient(t, s.URL, nil), newClient(t, s.URL, nil)
	ctx, res := ctxOf(t), name(t)

	before := time.Now()
	g, err := c.Acquire(ctx, res, &mutexd.AcquireOptions{Owner: "host-a:1", TTL: 5 * time.Second,
		Metadata: map[string]string{"address": "host-a:9000"}})
	if err != nil {
		t.Fatal(err)
	}
	if g.Resource != res || g.Owner != "host-a:1" || g.TTL != 5*time.Second || g.FencingToken == 0 ||
		len(g.LeaseID) != 36 || g.Limit != 1 || g.Shared {
		t.Fatalf("grant: %+v", g)
	}
	if string(g.Metadata) != `{"address":"host-a:9000"}` {
		t.Fatalf("metadata: %s", g.Metadata)
	}
	if g.ExpiresIn <= 4*time.Second || g.ExpiresIn > 5*time.Second || g.AcquiredAt.IsZero() {
		t.Fatalf("times: %+v", g)
	}
	// The deadline counts from when the request was sent.
	if d := g.Deadline.Sub(before); d < g.ExpiresIn || d > g.ExpiresIn+time.Second {
		t.Fatalf("deadline %v after the send, expires in %v", d, g.ExpiresIn)
	}

	st, err := other.Get(ctx, res)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Held() || st.Holder == nil || st.Holder.FencingToken != g.FencingToken ||
		st.Holder.Owner != "host-a:1" || len(st.Holders) != 1 || st.Limit != 1 || st.Index == 0 {
		t.Fatalf("state: %+v", st)
	}

	_, err = other.Acquire(ctx, res, &mutexd.AcquireOptions{Owner: "host-b:2"})
	mustIs(t, err, mutexd.ErrLeaseHeld)
	mustIs(t, err, mutexd.ErrConflict)
	held := apiError(t, err)
	if held.Status != 409 || held.Code != "lease_held" || held.Holder == nil ||
		held.Holder.FencingToken != g.FencingToken || held.Holder.Owner != "host-a:1" ||
		held.RetryAfter < time.Second || held.RetryAfter > 5*time.Second || held.RequestID == "" {
		t.Fatalf("lease_held: %+v %+v", held, held.Holder)
	}
	if errors.Is(err, mutexd.ErrLeaseLost) || mutexd.IsRetryable(err) {
		t.Fatal("lease_held is neither lease_lost nor retryable")
	}

	r, err := c.Renew(ctx, res, g.LeaseID, &mutexd.RenewOptions{TTL: 8 * time.Second,
		Metadata: json.RawMessage(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if r.FencingToken != g.FencingToken || r.TTL != 8*time.Second || string(r.Metadata) != `{"n":1}` ||
		r.RenewedAt.IsZero() {
		t.Fatalf("renewal: %+v", r)
	}

	if err := c.Release(ctx, res, g.LeaseID); err != nil {
		t.Fatal(err)
	}
	st, err = other.Get(ctx, res)
	if err != nil || st.Held() || st.Holder != nil || len(st.Holders) != 0 {
		t.Fatalf("after release: %+v %v", st, err)
	}
	err = c.Release(ctx, res, g.LeaseID)
	mustIs(t, err, mutexd.ErrLeaseLost)
	if e := apiError(t, err); e.Code != "lease_lost" || e.Status != 409 {
		t.Fatalf("%+v", e)
	}
	// Another grant took its place: renewing it is refused too.
	g2, err := other.Acquire(ctx, res, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g2.FencingToken <= g.FencingToken {
		t.Fatalf("tokens: %d then %d", g.FencingToken, g2.FencingToken)
	}
	_, err = c.Renew(ctx, res, g.LeaseID, nil)
	mustIs(t, err, mutexd.ErrLeaseLost)
}

func TestTheSameProposedLeaseIDIsTheSameLease(t *testing.T) {
	s := server(t)
	c := newClient(t, s.URL, nil)
	ctx, res, id := ctxOf(t), name(t), mutexd.NewLeaseID()
	first, err := c.Acquire(ctx, res, &mutexd.AcquireOptions{LeaseID: id, TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Acquire(ctx, res, &mutexd.AcquireOptions{LeaseID: id, TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if again.LeaseID != id || again.FencingToken != first.FencingToken {
		t.Fatalf("%+v then %+v", first, again)
	}
	if first.Owner != mutexd.DefaultOwner() {
		t.Fatalf("default owner %q, want %q", first.Owner, mutexd.DefaultOwner())
	}
}

func TestAWaitingAcquireIsGrantedOnRelease(t *testing.T) {
	s := server(t)
	c, other := newClient(t, s.URL, nil), newClient(t, s.URL, nil)
	ctx, res := ctxOf(t), name(t)
	g, err := c.Acquire(ctx, res, &mutexd.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = c.Release(context.Background(), res, g.LeaseID)
	}()
	start := time.Now()
	w, err := other.Acquire(ctx, res, &mutexd.AcquireOptions{Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 200*time.Millisecond || took > 3*time.Second {
		t.Fatalf("granted after %v", took)
	}
	if w.FencingToken <= g.FencingToken {
		t.Fatal("the token did not grow")
	}
	// A wait that runs out is lease_held.
	start = time.Now()
	_, err = c.Acquire(ctx, res, &mutexd.AcquireOptions{Wait: 400 * time.Millisecond})
	mustIs(t, err, mutexd.ErrLeaseHeld)
	if took := time.Since(start); took < 350*time.Millisecond {
		t.Fatalf("answered after %v", took)
	}
}

func TestErrorAnswers(t *testing.T) {
	s := server(t)
	c := newClient(t, s.URL, nil)
	ctx, res := ctxOf(t), name(t)

	_, err := c.Acquire(ctx, "bad//name", nil)
	mustIs(t, err, mutexd.ErrInvalidRequest)
	mustIs(t, err, mutexd.ErrAPI)
	mustIs(t, err, mutexd.ErrMutexd)
	if e := apiError(t, err); e.Status != 400 || e.Code != "invalid_resource" {
		t.Fatalf("%+v", e)
	}
	// A name with characters the API does not allow stays one path segment.
	_, err = c.Get(ctx, "a?b#c%d e")
	if e := apiError(t, err); e.Code != "invalid_resource" {
		t.Fatalf("%+v", e)
	}
	_, err = c.Acquire(ctx, res, &mutexd.AcquireOptions{TTL: 100 * time.Millisecond})
	if e := apiError(t, err); e.Code != "invalid_ttl" || e.Field != "ttl_ms" {
		t.Fatalf("%+v", e)
	}
	_, err = c.Acquire(ctx, res, &mutexd.AcquireOptions{Metadata: []int{1}})
	if e := apiError(t, err); e.Code != "invalid_field" || e.Field != "metadata" {
		t.Fatalf("%+v", e)
	}
	_, err = c.Renew(ctx, res, "not-a-uuid", nil)
	if e := apiError(t, err); e.Code != "invalid_lease_id" {
		t.Fatalf("%+v", e)
	}
	if _, err := c.Acquire(ctx, "", nil); err == nil || errors.Is(err, mutexd.ErrAPI) {
		t.Fatalf("an empty name is the caller's error: %v", err)
	}

	// A wrong base URL: 404 not_found.
	wrong := newClient(t, s.URL+"/nothing/here", nil)
	_, err = wrong.Get(ctx, res)
	mustIs(t, err, mutexd.ErrNotFound)
	if e := apiError(t, err); e.Status != 404 || e.Code != "not_found" {
		t.Fatalf("%+v", e)
	}
}

func TestAuthorizationErrors(t *testing.T) {
	dir := t.TempDir()
	hash := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	tokens := filepath.Join(dir, "tokens")
	text := "reader sha256:" + hash("reader-token") + " read\n" +
		"admin sha256:" + hash("admin-token") + " read,write,admin\n"
	if err := os.WriteFile(tokens, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	s := server(t, "--auth-tokens", tokens)
	ctx, res := ctxOf(t), name(t)

	_, err := newClient(t, s.URL, nil).Get(ctx, res)
	mustIs(t, err, mutexd.ErrUnauthorized)
	if e := apiError(t, err); e.Status != 401 || e.Code != "unauthorized" {
		t.Fatalf("%+v", e)
	}
	reader := newClient(t, s.URL, &mutexd.Options{Token: "reader-token"})
	if _, err := reader.Get(ctx, res); err != nil {
		t.Fatal(err)
	}
	_, err = reader.Acquire(ctx, res, nil)
	mustIs(t, err, mutexd.ErrForbidden)
	if e := apiError(t, err); e.Status != 403 || e.Code != "forbidden" {
		t.Fatalf("%+v", e)
	}
	who, err := reader.WhoAmI(ctx)
	if err != nil || who.Name != "reader" || !who.HasScope("read") || who.HasScope("admin") {
		t.Fatalf("%+v %v", who, err)
	}
	t.Setenv("MUTEXD_URL", s.URL)
	t.Setenv("MUTEXD_TOKEN", "admin-token")
	admin, err := mutexd.NewFromEnv(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if who, err := admin.WhoAmI(ctx); err != nil || who.Name != "admin" || !who.HasScope("admin") {
		t.Fatalf("%+v %v", who, err)
	}
}

func TestBreak(t *testing.T) {
	s := server(t)
	c := newClient(t, s.URL, nil)
	ctx, res := ctxOf(t), name(t)
	g, err := c.Acquire(ctx, res, &mutexd.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	broken, err := c.Break(ctx, res, &mutexd.BreakOptions{Reason: "test"})
	if err != nil || !broken {
		t.Fatalf("%v %v", broken, err)
	}
	if broken, err := c.Break(ctx, res, nil); err != nil || broken {
		t.Fatalf("a free resource: %v %v", broken, err)
	}
	_, err = c.Renew(ctx, res, g.LeaseID, nil)
	mustIs(t, err, mutexd.ErrLeaseLost)
}

func TestWatchListAndEvents(t *testing.T) {
	s := server(t)
	c, other := newClient(t, s.URL, nil), newClient(t, s.URL, nil)
	ctx := ctxOf(t)
	prefix := name(t) + "/"
	st, err := c.Get(ctx, prefix+"a")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, _ = other.Acquire(context.Background(), prefix+"a", &mutexd.AcquireOptions{Owner: "w-a", TTL: 10 * time.Second})
	}()
	start := time.Now()
	st2, err := c.Watch(ctx, prefix+"a", st.Index, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 200*time.Millisecond || took > 4*time.Second || !st2.Held() ||
		st2.Index <= st.Index || st2.Holder.Owner != "w-a" {
		t.Fatalf("after %v: %+v", took, st2)
	}
	// A watch that runs out answers the state as it is.
	st3, err := c.Watch(ctx, prefix+"a", st2.Index, 300*time.Millisecond)
	if err != nil || st3.Index != st2.Index {
		t.Fatalf("%+v %v", st3, err)
	}

	for _, n := range []string{"c", "b"} {
		if _, err := c.Acquire(ctx, prefix+n, &mutexd.AcquireOptions{Owner: "w-" + n, TTL: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	page, err := c.List(ctx, &mutexd.ListOptions{Prefix: prefix, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Resources) != 2 || page.Resources[0].Resource != prefix+"a" || page.NextCursor == "" || page.Index == 0 {
		t.Fatalf("%+v", page)
	}
	all, index, err := c.ListAll(ctx, prefix)
	if err != nil || len(all) != 3 || all[2].Resource != prefix+"c" || index == 0 {
		t.Fatalf("%+v %v", all, err)
	}
	// A list watch: woken by a change under its prefix, not by one elsewhere.
	go func() {
		time.Sleep(200 * time.Millisecond)
		_, _ = other.Acquire(context.Background(), name(t), nil)
		time.Sleep(300 * time.Millisecond)
		_, _ = other.Acquire(context.Background(), prefix+"d", &mutexd.AcquireOptions{TTL: 10 * time.Second})
	}()
	start = time.Now()
	page, err = c.List(ctx, &mutexd.ListOptions{Prefix: prefix, Index: index, Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 400*time.Millisecond || len(page.Resources) != 4 || page.Index <= index {
		t.Fatalf("after %v: %d resources, index %d", took, len(page.Resources), page.Index)
	}

	ev, err := c.Events(ctx, &mutexd.EventsOptions{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if len(ev.Events) != 4 || ev.Events[0].Type != "granted" || ev.Events[0].Resource != prefix+"a" ||
		ev.Events[0].Owner != "w-a" || ev.Events[0].FencingToken == 0 || ev.Next < ev.Events[3].Index {
		t.Fatalf("%+v", ev)
	}
	for i := 1; i < len(ev.Events); i++ {
		if ev.Events[i].Index <= ev.Events[i-1].Index {
			t.Fatalf("not in order: %+v", ev.Events)
		}
	}
	// Following: a request with Wait gets the next event.
	go func() {
		time.Sleep(200 * time.Millisecond)
		_, _ = other.Break(context.Background(), prefix+"a", nil)
	}()
	next, err := c.Events(ctx, &mutexd.EventsOptions{Prefix: prefix, After: ev.Next, Wait: 5 * time.Second})
	if err != nil || len(next.Events) != 1 || next.Events[0].Type != "broken" || next.Truncated {
		t.Fatalf("%+v %v", next, err)
	}
}

func TestTransportAndProtocolErrors(t *testing.T) {
	ctx := ctxOf(t)
	_, err := newClient(t, deadURL(t), nil).Get(ctx, "x")
	mustIs(t, err, mutexd.ErrTransport)
	var te *mutexd.TransportError
	if !errors.As(err, &te) || te.Timeout() || errors.Is(err, mutexd.ErrAPI) || !mutexd.IsRetryable(err) {
		t.Fatalf("%T %v", err, err)
	}
	if !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("the cause is not said: %v", err)
	}

	q := newSilent(t)
	start := time.Now()
	_, err = newClient(t, q.URL, &mutexd.Options{Timeout: 300 * time.Millisecond}).Get(ctx, "x")
	mustIs(t, err, mutexd.ErrTimeout)
	if !errors.As(err, &te) || !te.Timeout() || time.Since(start) > 2*time.Second {
		t.Fatalf("%v after %v", err, time.Since(start))
	}

	notJSON := newStandIn(t, func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("<html>hello</html>")) })
	_, err = newClient(t, notJSON.URL, nil).Get(ctx, "x")
	mustIs(t, err, mutexd.ErrProtocol)
	mustIs(t, err, mutexd.ErrTransport)

	// An error status without the API's body (a proxy's page): the class of its status.
	proxy := newStandIn(t, func(w http.ResponseWriter, r *http.Request) { http.Error(w, "bad gateway", 502) })
	_, err = newClient(t, proxy.URL, nil).Get(ctx, "x")
	mustIs(t, err, mutexd.ErrServerError)
	if e := apiError(t, err); e.Code != "" || e.Status != 502 || !strings.Contains(e.Message, "bad gateway") {
		t.Fatalf("%+v", e)
	}

	// The caller's context ending is the context's error, not the server's fault.
	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	_, err = newClient(t, q.URL, nil).Get(cctx, "x")
	if !errors.Is(err, context.Canceled) || errors.Is(err, mutexd.ErrTransport) {
		t.Fatalf("%T %v", err, err)
	}
}

func TestURLsAreCheckedAndNoProxyIsUsed(t *testing.T) {
	for _, bad := range []string{"ftp://x", "http://", "http://x?y=1", "unix:///tmp/s", " , "} {
		if _, err := mutexd.New(bad, nil); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	s := server(t)
	t.Setenv("HTTP_PROXY", deadURL(t))
	t.Setenv("http_proxy", deadURL(t))
	if _, err := newClient(t, s.URL, nil).Get(ctxOf(t), "x"); err != nil {
		t.Fatalf("a proxy of the environment was used: %v", err)
	}
}

func TestServersOfAServerWithoutHA(t *testing.T) {
	s := server(t)
	c := newClient(t, s.URL, nil)
	v, err := c.Servers(ctxOf(t))
	if err != nil {
		t.Fatal(err)
	}
	if v.Self.Role != "alone" || v.Self.URL != "" || v.Active != nil || len(v.Servers) != 0 {
		t.Fatalf("a server without --ha: %+v", v)
	}
}
