package mutexd_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	mutexd "github.com/mutexd/mutexd/clients/go"
)

const leaderTTL = 1500 * time.Millisecond

// candidate runs RunWhenLeader in a goroutine and records its terms.
type candidate struct {
	tag     string
	cancel  context.CancelFunc
	ended   chan struct{}
	err     error
	shared  *leaders
	mu      sync.Mutex
	terms   []context.Context
	tokens  []uint64
	standby []error
	leading chan struct{} // receives once per term
}

// leaders is what the candidates of a test share: who leads now, and the most at once.
type leaders struct {
	mu   sync.Mutex
	now  map[string]bool
	most int
	log  []string
}

func (l *leaders) enter(tag string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.now[tag] = true
	if len(l.now) > l.most {
		l.most = len(l.now)
	}
	l.log = append(l.log, tag)
}

func (l *leaders) leave(tag string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.now, tag)
}

func runCandidate(t *testing.T, url, res, tag string, shared *leaders, retry time.Duration) *candidate {
	c := newClient(t, url, &mutexd.Options{Timeout: 2 * time.Second, Owner: tag})
	ctx, cancel := context.WithCancel(context.Background())
	w := &candidate{tag: tag, cancel: cancel, ended: make(chan struct{}), shared: shared,
		leading: make(chan struct{}, 16)}
	go func() {
		defer close(w.ended)
		w.err = c.RunWhenLeader(ctx, res, func(ctx context.Context, token uint64) error {
			shared.enter(tag)
			defer shared.leave(tag)
			w.mu.Lock()
			w.terms = append(w.terms, ctx)
			w.tokens = append(w.tokens, token)
			w.mu.Unlock()
			w.leading <- struct{}{}
			<-ctx.Done() // the leader's work, until told to stop
			return ctx.Err()
		}, &mutexd.LeaderOptions{TTL: leaderTTL, RetryInterval: retry, OnStandby: func(err error, d time.Duration) {
			w.mu.Lock()
			w.standby = append(w.standby, err)
			w.mu.Unlock()
		}})
	}()
	t.Cleanup(func() { cancel(); <-w.ended })
	return w
}

func (w *candidate) finish(t *testing.T) {
	t.Helper()
	w.cancel()
	select {
	case <-w.ended:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: RunWhenLeader did not return", w.tag)
	}
	if w.err != nil {
		t.Fatalf("%s: %v", w.tag, w.err)
	}
}

func (w *candidate) term(i int) (context.Context, uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.terms[i], w.tokens[i]
}

func waitLeading(t *testing.T, w *candidate, d time.Duration) {
	t.Helper()
	select {
	case <-w.leading:
	case <-time.After(d):
		t.Fatalf("%s did not lead within %v", w.tag, d)
	}
}

func TestHandOverBetweenTwoLoops(t *testing.T) {
	s := server(t)
	ctx, res := ctxOf(t), name(t)
	other := newClient(t, s.URL, nil)
	shared := &leaders{now: map[string]bool{}}
	a := runCandidate(t, s.URL, res, "a", shared, 200*time.Millisecond)
	waitLeading(t, a, 5*time.Second)
	b := runCandidate(t, s.URL, res, "b", shared, 200*time.Millisecond)
	time.Sleep(800 * time.Millisecond) // b tries a few times; a keeps the lease by renewing
	select {
	case <-b.leading:
		t.Fatal("b leads beside a")
	default:
	}
	b.mu.Lock()
	if len(b.standby) == 0 || !errors.Is(b.standby[0], mutexd.ErrLeaseHeld) {
		t.Fatalf("standby: %v", b.standby)
	}
	b.mu.Unlock()
	if st, _ := other.Get(ctx, res); st.Holder == nil || st.Holder.Owner != "a" {
		t.Fatalf("%+v", st)
	}
	stopped := time.Now()
	a.finish(t) // a releases; b takes over at its next try
	waitLeading(t, b, 3*time.Second)
	if took := time.Since(stopped); took > 1500*time.Millisecond {
		t.Fatalf("b led %v after a stopped", took)
	}
	actx, atoken := a.term(0)
	if actx.Err() == nil {
		t.Fatal("a's leader context was not cancelled")
	}
	if st, _ := other.Get(ctx, res); st.Holder == nil || st.Holder.Owner != "b" {
		t.Fatalf("%+v", st)
	}
	b.finish(t)
	if st, _ := other.Get(ctx, res); st.Held() {
		t.Fatal("not released when the loop ended")
	}
	_, btoken := b.term(0)
	if shared.most != 1 || btoken <= atoken || len(shared.log) != 2 {
		t.Fatalf("most %d at once, log %v, tokens %d %d", shared.most, shared.log, atoken, btoken)
	}
}

func TestALossCancelsTheLeaderAtOnceAndTheLoopTriesAgain(t *testing.T) {
	s := server(t)
	ctx, res := ctxOf(t), name(t)
	other := newClient(t, s.URL, nil)
	w := runCandidate(t, s.URL, res, "w", &leaders{now: map[string]bool{}}, 200*time.Millisecond)
	waitLeading(t, w, 5*time.Second)
	first, token := w.term(0)
	lease := mutexd.LeaseFromContext(first)
	if lease == nil || lease.Token() != token {
		t.Fatal("LeaseFromContext")
	}
	if _, err := other.Break(ctx, res, nil); err != nil {
		t.Fatal(err)
	}
	broken := time.Now()
	select {
	case <-first.Done():
	case <-time.After(leaderTTL/3 + 700*time.Millisecond):
		t.Fatal("the leader's context was not cancelled")
	}
	if took := time.Since(broken); took > leaderTTL/3+700*time.Millisecond {
		t.Fatalf("after %v", took)
	}
	mustIs(t, lease.Err(), mutexd.ErrLeaseLost)
	// The loop went back to acquiring: the resource was free, so w leads again.
	waitLeading(t, w, 5*time.Second)
	if _, token2 := w.term(1); token2 <= token {
		t.Fatal("the token did not grow")
	}
	w.finish(t)
}

func TestTheLeaderIsCancelledWhenTheServerDies(t *testing.T) {
	s := server(t)
	w := runCandidate(t, s.URL, name(t), "w", &leaders{now: map[string]bool{}}, 300*time.Millisecond)
	waitLeading(t, w, 5*time.Second)
	term, _ := w.term(0)
	time.Sleep(600 * time.Millisecond)
	s.Kill()
	killed := time.Now()
	select {
	case <-term.Done():
	case <-time.After(leaderTTL + 500*time.Millisecond):
		t.Fatal("the leader's context was not cancelled")
	}
	if took := time.Since(killed); took < leaderTTL/3 || took > leaderTTL+600*time.Millisecond {
		t.Fatalf("after %v", took)
	}
	mustIs(t, mutexd.LeaseFromContext(term).Err(), mutexd.ErrLeaseExpired)
	within(t, 2*time.Second, "a standby on a transport error", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, e := range w.standby {
			if errors.Is(e, mutexd.ErrTransport) {
				return true
			}
		}
		return false
	})
	w.finish(t)
}

func TestAFunctionReturningReleasesAndRunsAgain(t *testing.T) {
	s := server(t)
	ctx, res := ctxOf(t), name(t)
	c := newClient(t, s.URL, nil)
	var times []time.Time
	var tokens []uint64
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err := c.RunWhenLeader(lctx, res, func(ctx context.Context, token uint64) error {
		times = append(times, time.Now())
		tokens = append(tokens, token)
		if len(times) == 2 {
			cancel()
		}
		return nil
	}, &mutexd.LeaderOptions{TTL: leaderTTL, RetryInterval: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(times) != 2 || times[1].Sub(times[0]) < 250*time.Millisecond || tokens[1] <= tokens[0] {
		t.Fatalf("%v %v", times, tokens)
	}
	if st, _ := c.Get(ctx, res); st.Held() {
		t.Fatal("not released")
	}
}

func TestAFunctionsErrorIsReturnedAfterTheRelease(t *testing.T) {
	s := server(t)
	ctx, res := ctxOf(t), name(t)
	c := newClient(t, s.URL, nil)
	boom := errors.New("leader task failed")
	err := c.RunWhenLeader(ctx, res, func(context.Context, uint64) error { return boom }, nil)
	if err != boom {
		t.Fatalf("%v", err)
	}
	if st, _ := c.Get(ctx, res); st.Held() {
		t.Fatal("not released")
	}
}

func TestConfigurationErrorsAreReturned(t *testing.T) {
	s := server(t)
	ctx := ctxOf(t)
	c := newClient(t, s.URL, nil)
	never := func(context.Context, uint64) error { t.Error("must not run"); return nil }
	err := c.RunWhenLeader(ctx, "bad//name", never, nil)
	if e := apiError(t, err); e.Code != "invalid_resource" {
		t.Fatal(e)
	}
	err = c.RunWhenLeader(ctx, "good", never, &mutexd.LeaderOptions{TTL: 100 * time.Millisecond})
	if e := apiError(t, err); e.Code != "invalid_ttl" {
		t.Fatal(e)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.RunWhenLeader(done, name(t), never, nil); err != nil {
		t.Fatal(err)
	}
}
