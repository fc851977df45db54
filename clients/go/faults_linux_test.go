//go:build linux

package mutexd_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	mutexd "github.com/mutexd/mutexd/clients/go"
)

func init() { helpers["leader"] = leaderHelper }

// clockMonotonic is CLOCK_MONOTONIC in nanoseconds: one clock for every process of the
// machine, on which the test and its child compare their times.
func clockMonotonic() int64 {
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		panic(e)
	}
	return ts.Nano()
}

// monotonic is t (a time of this process, with its monotonic reading) on CLOCK_MONOTONIC.
func monotonic(t time.Time) int64 {
	now, mono := time.Now(), clockMonotonic()
	return mono + int64(t.Sub(now))
}

// leaderHelper leads MUTEXD_RESOURCE with RunWhenLeader. Before each beat (every 200 ms)
// it checks its context, which compares the lease's deadline with the clock, and prints
// "LEAD <token> <deadline>"; once the lease is lost, "LOST <deadline> <why>" (deadlines on
// CLOCK_MONOTONIC, in ns).
func leaderHelper() int {
	ttl, _ := strconv.Atoi(os.Getenv("MUTEXD_TTL_MS"))
	c, err := mutexd.NewFromEnv(&mutexd.Options{Timeout: 2 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	err = c.RunWhenLeader(context.Background(), os.Getenv("MUTEXD_RESOURCE"), func(ctx context.Context, token uint64) error {
		lease := mutexd.LeaseFromContext(ctx)
		for ctx.Err() == nil {
			fmt.Printf("LEAD %d %d\n", token, monotonic(lease.Deadline()))
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
		fmt.Printf("LOST %d %v\n", monotonic(lease.Deadline()), lease.Err())
		return nil
	}, &mutexd.LeaderOptions{TTL: time.Duration(ttl) * time.Millisecond, RetryInterval: 500 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

type line struct {
	text string
	at   int64 // CLOCK_MONOTONIC when the test read it
}

// TestALeaderPausedPastItsTTLIsLostBeforeAnotherIsGranted pauses a leader process
// (SIGSTOP) right after one of its beats, until past its lease's TTL, while another client
// waits for the resource. The leader's deadline must come before that client's grant by
// at least half the safety margin, and once resumed the leader must find its lease lost
// at its first check: a LOST line, and no beat after it resumed.
func TestALeaderPausedPastItsTTLIsLostBeforeAnotherIsGranted(t *testing.T) {
	const ttl = 2 * time.Second
	s := server(t)
	ctx, res := ctxOf(t), name(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "MUTEXD_GO_TEST_HELPER=leader", "MUTEXD_URL="+s.URL,
		"MUTEXD_RESOURCE="+res, "MUTEXD_TTL_MS="+strconv.Itoa(int(ttl/time.Millisecond)))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan line, 1000)
	var mu sync.Mutex
	var all []line
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			l := line{sc.Text(), clockMonotonic()}
			mu.Lock()
			all = append(all, l)
			mu.Unlock()
			lines <- l
		}
		close(lines)
	}()
	next := func(d time.Duration) line {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the leader exited")
			}
			return l
		case <-time.After(d):
			t.Fatal("the leader said nothing")
		}
		return line{}
	}
	var token uint64
	for i := 0; i < 4; i++ { // paused right after a beat: its next action is due soon
		l := next(10 * time.Second)
		if !strings.HasPrefix(l.text, "LEAD ") {
			t.Fatalf("%q", l.text)
		}
		token, _ = strconv.ParseUint(strings.Fields(l.text)[1], 10, 64)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	c := newClient(t, s.URL, nil)
	g, err := c.Acquire(ctx, res, &mutexd.AcquireOptions{Owner: "another", TTL: 30 * time.Second, Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	granted := clockMonotonic() // the grant came at the latest now
	if g.FencingToken <= token {
		t.Fatalf("token %d after %d", g.FencingToken, token)
	}
	time.Sleep(time.Until(paused.Add(ttl + 500*time.Millisecond)))
	resumed := clockMonotonic()
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	first := next(3 * time.Second)
	for first.at < resumed { // a line written before the pause, read late
		first = next(3 * time.Second)
	}
	time.Sleep(time.Second)
	mu.Lock()
	var late []string
	for _, l := range all {
		if l.at >= resumed && strings.HasPrefix(l.text, "LEAD ") {
			late = append(late, l.text)
		}
	}
	mu.Unlock()
	if len(late) > 0 {
		t.Fatalf("the leader acted %d time(s) after it was resumed: %q", len(late), late)
	}
	f := strings.Fields(first.text)
	if len(f) < 3 || f[0] != "LOST" {
		t.Fatalf("the first line after the pause is %q, not LOST", first.text)
	}
	if !strings.Contains(first.text, "lease expired") {
		t.Fatalf("%q", first.text)
	}
	deadline, _ := strconv.ParseInt(f[1], 10, 64)
	margin := int64(ttl / 50) // the contract's, whatever the client computes
	early := granted - deadline
	t.Logf("the leader's deadline came %v before the other's grant was answered", time.Duration(early))
	if early < margin/2 {
		t.Fatalf("the leader's deadline came %v before the other's grant, not at least %v: the lease could be held twice",
			time.Duration(early), time.Duration(margin/2))
	}
	st, err := c.Get(ctx, res)
	if err != nil || st.Holder == nil || st.Holder.Owner != "another" {
		t.Fatalf("%+v %v", st, err)
	}
}

// TestAServerRestartShorterThanTheTTLKeepsTheLease kills the server (SIGKILL) and starts
// it again on the same port and data directory within half the TTL: the lock keeps its
// lease and its fencing token, and its renewals go on.
func TestAServerRestartShorterThanTheTTLKeepsTheLease(t *testing.T) {
	const ttl = 3 * time.Second
	s := server(t)
	ctx, res := ctxOf(t), name(t)
	c := newClient(t, s.URL, &mutexd.Options{Timeout: 2 * time.Second})
	lease, err := c.Lock(ctx, res, &mutexd.LockOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	within(t, 2*ttl, "a renewal", func() bool { return lease.Renewals() >= 1 })
	token, n := lease.Token(), lease.Renewals()
	s.Kill()
	killed := time.Now()
	time.Sleep(700 * time.Millisecond)
	s.Start()
	if down := time.Since(killed); down > ttl/2 {
		t.Fatalf("the restart took %v", down)
	}
	within(t, 2*ttl, "a renewal after the restart", func() bool { return lease.Renewals() > n })
	time.Sleep(ttl)
	if !lease.Held() || lease.Token() != token || lease.Grant().FencingToken != token {
		t.Fatalf("lost across the restart: %v", lease.Err())
	}
	select {
	case <-lease.Done():
		t.Fatal("Done closed")
	default:
	}
	st, err := newClient(t, s.URL, nil).Get(ctx, res)
	if err != nil || st.Holder == nil || st.Holder.FencingToken != token {
		t.Fatalf("%+v %v", st, err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
