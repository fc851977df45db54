package mutexd_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	mutexd "github.com/mutexd/mutexd/clients/go"
	"github.com/mutexd/mutexd/clients/go/internal/testserver"
)

// startGroup starts n servers of one group (--ha) on one container of a real Azurite, each
// given extra too.
func startGroup(t *testing.T, n int, extra ...string) []*testserver.Server {
	az := testserver.StartAzurite(t)
	var b [10]byte
	_, _ = rand.Read(b[:])
	container := "g" + hex.EncodeToString(b[:])
	var group []*testserver.Server
	for i := 0; i < n; i++ {
		args := []string{"--ha", "--advertise-url", "{url}", "--mirror", "sync",
			"--blob-connection-string", az.ConnectionString, "--blob-container", container}
		args = append(args, extra...)
		s := testserver.New(t, 0, args)
		group = append(group, s.Start())
	}
	return group
}

// activeOf is the server every live one names as active, once they agree.
func activeOf(t *testing.T, group []*testserver.Server, timeout time.Duration) *testserver.Server {
	t.Helper()
	end := time.Now().Add(timeout)
	for time.Now().Before(end) {
		urls := map[string]bool{}
		actives := 0
		for _, s := range group {
			if !s.Running() {
				continue
			}
			c := newClient(t, s.URL, &mutexd.Options{Timeout: 2 * time.Second})
			v, err := c.Servers(context.Background())
			c.Close()
			if err != nil || v.Active == nil {
				urls[""] = true
				continue
			}
			urls[v.Active.URL] = true
			if v.Self.Role == "active" {
				actives++
			}
		}
		if len(urls) == 1 && !urls[""] && actives == 1 {
			for _, s := range group {
				if urls[s.URL] {
					return s
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("no agreed active server")
	return nil
}

// TestALockKeepsItsLeaseAcrossASIGKILLOfTheActive: a Go lock given every server of a group
// goes straight to the active (Mutexd-Served-By), and keeps its lease and fencing token
// while the active is killed and a standby takes over.
func TestALockKeepsItsLeaseAcrossASIGKILLOfTheActive(t *testing.T) {
	const ttl = 10 * time.Second
	group := startGroup(t, 3)
	active := activeOf(t, group, 30*time.Second)
	var urls []string // the active last: the client starts with a standby
	for _, s := range group {
		if s != active {
			urls = append(urls, s.URL)
		}
	}
	urls = append(urls, active.URL)
	ctx, res := ctxOf(t), name(t)
	c := newClient(t, strings.Join(urls, ","), &mutexd.Options{Timeout: 5 * time.Second})
	lease, err := c.Lock(ctx, res, &mutexd.LockOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if c.URL() != active.URL {
		t.Fatalf("after an answer relayed by a standby, %s is asked first, not the active %s", c.URL(), active.URL)
	}
	token := lease.Token()
	time.Sleep(2 * time.Second)
	n := lease.Renewals()
	active.Kill()
	killed := time.Now()

	// Through the takeover and a while after it, the lease holds with its token.
	observer := newClient(t, strings.Join(urls, ","), &mutexd.Options{Timeout: 2 * time.Second})
	seen := 0
	for time.Since(killed) < 15*time.Second {
		if !lease.Held() {
			t.Fatalf("lost %v after the kill: %v", time.Since(killed), lease.Err())
		}
		st, err := observer.Get(ctx, res)
		if err == nil {
			if st.Holder == nil || st.Holder.FencingToken != token {
				t.Fatalf("%v after the kill, the holder is %+v", time.Since(killed), st.Holder)
			}
			seen++
		}
		time.Sleep(200 * time.Millisecond)
	}
	if seen == 0 {
		t.Fatal("the group never answered after the kill")
	}
	if lease.Renewals() <= n+1 || lease.Token() != token || lease.LastErr() != nil {
		t.Fatalf("%d renewals before the kill, %d after; last error %v", n, lease.Renewals(), lease.LastErr())
	}
	next := activeOf(t, group, 10*time.Second)
	if next == active {
		t.Fatal("the killed server is still the active")
	}
	if c.URL() != next.URL {
		t.Fatalf("the lock's client asks %s first, not the new active %s", c.URL(), next.URL)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
