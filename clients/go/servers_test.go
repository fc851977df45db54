package mutexd_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	mutexd "github.com/mutexd/mutexd/clients/go"
	"github.com/mutexd/mutexd/clients/go/internal/testserver"
)

func TestURLsFromAStringAndTheEnvironment(t *testing.T) {
	s := server(t)
	ctx := ctxOf(t)
	dead := deadURL(t)
	c := newClient(t, dead+" , "+s.URL+"/", nil)
	if got := c.URLs(); len(got) != 2 || got[0] != dead || got[1] != s.URL {
		t.Fatalf("%v", got)
	}
	if c.URL() != dead {
		t.Fatal(c.URL())
	}
	if _, err := c.Get(ctx, "tests/urls"); err != nil {
		t.Fatal(err)
	}
	if c.URL() != s.URL {
		t.Fatalf("the server that answered is not asked first: %s", c.URL())
	}
	t.Setenv("MUTEXD_URL", dead+","+s.URL)
	e, err := mutexd.NewFromEnv(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.URLs(); len(got) != 2 || got[1] != s.URL {
		t.Fatalf("%v", got)
	}
	if _, err := e.Get(ctx, "tests/urls"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MUTEXD_URL", "")
	if d, err := mutexd.New("", nil); err != nil || d.URLs()[0] != mutexd.DefaultURL {
		t.Fatalf("%v %v", d, err)
	}
}

func TestADeadServerIsPassedOverAndTheLiveOneKept(t *testing.T) {
	s := server(t)
	ctx, res := ctxOf(t), name(t)
	down := newStandIn(t, unavailable) // counts what reaches the first URL
	c := newClient(t, down.URL+","+deadURL(t)+","+s.URL, nil)
	g, err := c.Acquire(ctx, res, &mutexd.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if c.URL() != s.URL || down.Hits() != 1 {
		t.Fatalf("%s %d", c.URL(), down.Hits())
	}
	for i := 0; i < 3; i++ {
		if _, err := c.Renew(ctx, res, g.LeaseID, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Release(ctx, res, g.LeaseID); err != nil {
		t.Fatal(err)
	}
	if down.Hits() != 1 || c.URL() != s.URL {
		t.Fatal("the server that answered is not asked first")
	}
}

func TestAnErrorAnswerIsNotPassedOver(t *testing.T) {
	s := server(t)
	ctx, res := ctxOf(t), name(t)
	down := newStandIn(t, unavailable)
	c := newClient(t, s.URL+","+down.URL, nil)
	if _, err := newClient(t, s.URL, nil).Acquire(ctx, res, nil); err != nil {
		t.Fatal(err)
	}
	_, err := c.Acquire(ctx, res, nil)
	mustIs(t, err, mutexd.ErrLeaseHeld)
	if down.Hits() != 0 {
		t.Fatal("an answer was passed over")
	}
}

func TestWhenEveryServerFailsTheLastErrorIsReturned(t *testing.T) {
	ctx := ctxOf(t)
	a, b := deadURL(t), deadURL(t)
	c := newClient(t, a+","+b, nil)
	_, err := c.Get(ctx, "x")
	var te *mutexd.TransportError
	if !errors.As(err, &te) || !strings.HasPrefix(te.URL, b) {
		t.Fatalf("%v", err)
	}
	if c.URL() != a {
		t.Fatal(c.URL())
	}
	down := newStandIn(t, unavailable)
	c = newClient(t, a+","+down.URL, &mutexd.Options{Timeout: 500 * time.Millisecond})
	_, err = c.Get(ctx, "x")
	mustIs(t, err, mutexd.ErrUnavailable)
	if down.Hits() != 1 { // a pause of 1 s would not end within the timeout
		t.Fatal(down.Hits())
	}
}

func Test503AnswersAreTriedAgainAfterTheirRetryAfter(t *testing.T) {
	ctx := ctxOf(t)
	x, y := newStandIn(t, unavailable), newStandIn(t, unavailable)
	c := newClient(t, x.URL+","+y.URL, &mutexd.Options{Timeout: 1500 * time.Millisecond})
	start := time.Now()
	_, err := c.Get(ctx, "x")
	took := time.Since(start)
	mustIs(t, err, mutexd.ErrUnavailable)
	if e := apiError(t, err); e.Reason != "no_active_server" || e.RetryAfter != time.Second {
		t.Fatalf("%+v", e)
	}
	if !mutexd.IsRetryable(err) {
		t.Fatal("503 is retryable")
	}
	// Two rounds, 1 s apart (Retry-After: 1); a third would end past the timeout.
	if x.Hits() != 2 || y.Hits() != 2 || took < time.Second || took >= 1500*time.Millisecond {
		t.Fatalf("%d %d hits in %v", x.Hits(), y.Hits(), took)
	}
}

// lossy forwards each request to a real server and drops the answer (it records its
// body): a grant whose answer was lost.
type lossy struct {
	URL     string
	mu      sync.Mutex
	answers [][]byte
}

func newLossy(t *testing.T, target string) *lossy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	p := &lossy{URL: "http://" + l.Addr().String()}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				up, err := net.Dial("tcp", strings.TrimPrefix(target, "http://"))
				if err != nil {
					return
				}
				defer up.Close()
				buf := make([]byte, 65536)
				n, _ := conn.Read(buf)
				_, _ = up.Write(buf[:n])
				_ = up.SetReadDeadline(time.Now().Add(5 * time.Second))
				var answer []byte
				for !bytes.Contains(answer, []byte("\r\n\r\n{")) || !json.Valid(answer[bytes.Index(answer, []byte("\r\n\r\n"))+4:]) {
					m, err := up.Read(buf)
					if err != nil {
						break
					}
					answer = append(answer, buf[:m]...)
				}
				if i := bytes.Index(answer, []byte("\r\n\r\n")); i >= 0 {
					p.mu.Lock()
					p.answers = append(p.answers, answer[i+4:])
					p.mu.Unlock()
				}
			}()
		}
	}()
	return p
}

func TestAnAcquireWhoseAnswerWasLostGetsItsLeaseFromTheNextServer(t *testing.T) {
	s := server(t)
	ctx, res := ctxOf(t), name(t)
	p := newLossy(t, s.URL)
	c := newClient(t, p.URL+","+s.URL, nil)
	g, err := c.Acquire(ctx, res, &mutexd.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	answers := p.answers
	p.mu.Unlock()
	if len(answers) != 1 {
		t.Fatalf("%d answers dropped", len(answers))
	}
	var granted struct {
		LeaseID      string `json:"lease_id"`
		FencingToken uint64 `json:"fencing_token"`
	}
	if err := json.Unmarshal(answers[0], &granted); err != nil {
		t.Fatal(err)
	}
	if granted.LeaseID != g.LeaseID || granted.FencingToken != g.FencingToken || c.URL() != s.URL {
		t.Fatalf("granted %+v, got %+v", granted, g)
	}
	_, err = c.Acquire(ctx, res, nil) // another proposed lease id: held, by the first one
	mustIs(t, err, mutexd.ErrLeaseHeld)
	if e := apiError(t, err); e.Holder.FencingToken != g.FencingToken {
		t.Fatal(e.Holder)
	}
}

func TestNoRenewalAttemptOutlivesTheDeadline(t *testing.T) {
	ctx := ctxOf(t)
	q := []*silent{newSilent(t), newSilent(t)}
	c := newClient(t, q[0].URL+","+q[1].URL, &mutexd.Options{Timeout: 10 * time.Second})
	deadline := time.Now().Add(600 * time.Millisecond)
	_, err := c.Renew(ctx, "r", mutexd.NewLeaseID(), &mutexd.RenewOptions{Deadline: deadline})
	mustIs(t, err, mutexd.ErrTimeout)
	if late := time.Since(deadline); late > 300*time.Millisecond {
		t.Fatalf("returned %v after the deadline", late)
	}
	time.Sleep(200 * time.Millisecond)
	attemptsWithin(t, q, deadline)
}

// TestTheClientGoesStraightToTheActive: an answer's Mutexd-Served-By names the active
// server of a group; when that URL is one of the client's, its next requests go there
// first; never to a URL it was not given.
func TestTheClientGoesStraightToTheActive(t *testing.T) {
	ctx, res := ctxOf(t), name(t)
	// A serves and names itself; B is a standby that forwards to A.
	a := testserver.New(t, 0, nil, "MUTEXD_FAULT_SERVED_BY={url}").Start()
	b := testserver.New(t, 0, nil, "MUTEXD_FAULT_ROLE=forward:"+a.URL).Start()
	c := newClient(t, b.URL+","+strings.ToUpper(a.URL[:4])+a.URL[4:]+"/", nil)
	g, err := c.Acquire(ctx, res, &mutexd.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if c.URL() != a.URL {
		t.Fatalf("after an answer through the standby, %s is asked first, not the active %s", c.URL(), a.URL)
	}
	// The standby is gone: the client goes on with the active, never trying B again.
	b.Kill()
	for i := 0; i < 3; i++ {
		if _, err := c.Renew(ctx, res, g.LeaseID, &mutexd.RenewOptions{Timeout: 300 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	if c.URL() != a.URL {
		t.Fatal(c.URL())
	}

	// A URL the client was not given is never used, and the answering server stays first.
	other := newStandIn(t, unavailable)
	d := testserver.New(t, 0, nil, "MUTEXD_FAULT_SERVED_BY="+other.URL).Start()
	only := newClient(t, d.URL, nil)
	for i := 0; i < 3; i++ {
		if _, err := only.Get(ctx, res); err != nil {
			t.Fatal(err)
		}
	}
	if other.Hits() != 0 || only.URL() != d.URL {
		t.Fatalf("%d requests went to a URL the client was not given", other.Hits())
	}
	// In a list, a server that answers and names another outside the list stays first.
	two := newClient(t, deadURL(t)+","+d.URL, nil)
	if _, err := two.Get(ctx, res); err != nil || two.URL() != d.URL || other.Hits() != 0 {
		t.Fatalf("%s %v", two.URL(), err)
	}
}
