package mutexd_test

// A partitioned group (--partitions 16) of three real servers on a real Azurite: the client
// sends each request about a resource straight to its partition's owner, so that no server
// forwards it, and follows a partition when its owner leaves; lists, list watches and events
// span the partitions, with positions (strings) for their index and next.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mutexd "github.com/mutexd/mutexd/clients/go"
	"github.com/mutexd/mutexd/clients/go/internal/testserver"
)

const partitions = 16

// settledMap waits until every running server of group has the same map, every partition
// owned by a running server and each owning its even share, and returns it: partition ->
// owner.
func settledMap(t *testing.T, group []*testserver.Server, timeout time.Duration) []*testserver.Server {
	t.Helper()
	end := time.Now().Add(timeout)
	var last []string
	for time.Now().Before(end) {
		byURL := map[string]*testserver.Server{}
		for _, s := range group {
			if s.Running() {
				byURL[s.URL] = s
			}
		}
		var maps [][]string
		for _, s := range byURL {
			c, err := mutexd.New(s.URL, &mutexd.Options{Timeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			v, err := c.Servers(context.Background())
			c.Close()
			if err != nil || v.Partitions == nil || v.Partitions.Count != partitions {
				maps = nil
				break
			}
			m := make([]string, partitions)
			for _, o := range v.Partitions.Owners {
				m[o.Partition] = o.URL
			}
			maps = append(maps, m)
		}
		if len(maps) == len(byURL) && len(maps) > 0 {
			last = maps[0]
			same := true
			for _, m := range maps[1:] {
				same = same && strings.Join(m, " ") == strings.Join(maps[0], " ")
			}
			share := map[string]int{}
			owned := true
			for _, u := range maps[0] {
				owned = owned && byURL[u] != nil
				share[u]++
			}
			lo := partitions / len(byURL)
			for _, n := range share {
				owned = owned && n >= lo && n <= lo+1
			}
			if same && owned {
				out := make([]*testserver.Server, partitions)
				for p, u := range maps[0] {
					out[p] = byURL[u]
				}
				return out
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the partitions did not settle within %v: %q", timeout, last)
	return nil
}

// forwarded is how many requests the running servers of group forwarded to another so far
// (mutexd_forwarded_requests_total of every status, summed).
func forwarded(t *testing.T, group []*testserver.Server) int64 {
	t.Helper()
	var sum int64
	for _, s := range group {
		if !s.Running() {
			continue
		}
		res, err := http.Get(s.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "mutexd_forwarded_requests_total") {
				continue
			}
			f := strings.Fields(line)
			n, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("%s/metrics: %q", s.URL, line)
			}
			sum += int64(n)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return sum
}

// namesIn is per resource names of the test's own in each partition.
func namesIn(t *testing.T, per int) [][]string {
	out := make([][]string, partitions)
	base := name(t)
	for i, filled := 0, 0; filled < partitions; i++ {
		n := fmt.Sprintf("%s-%d", base, i)
		p := mutexd.PartitionOf(n, partitions)
		if len(out[p]) < per {
			out[p] = append(out[p], n)
			if len(out[p]) == per {
				filled++
			}
		}
	}
	return out
}

// answers counts what a client's answers about a resource say: how many, and how many were
// served by another server than the one they were sent to; and its fetches of the map.
type answers struct {
	mu        sync.Mutex
	total     int
	forwarded []string
	fetches   int64
}

func watchAnswers(c *mutexd.Client) *answers {
	a := &answers{}
	mutexd.OnAnswer(c, func(to, method, path string, status int, h http.Header) {
		if path == "/v1/servers" {
			atomic.AddInt64(&a.fetches, 1)
			return
		}
		if !strings.HasPrefix(path, "/v1/resources/") {
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		a.total++
		if by := h.Get("Mutexd-Served-By"); by != to {
			a.forwarded = append(a.forwarded, fmt.Sprintf("%s %s sent to %s, %d served by %q",
				method, path, to, status, by))
		}
	})
	return a
}

// reset starts the count afresh.
func (a *answers) reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.total, a.forwarded = 0, nil
}

func (a *answers) check(t *testing.T, what string) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.total == 0 {
		t.Fatalf("%s: no answer about a resource", what)
	}
	if len(a.forwarded) > 0 {
		t.Fatalf("%s: %d of %d answers were not served where they were sent, the first: %s",
			what, len(a.forwarded), a.total, a.forwarded[0])
	}
}

// learned waits until c routes by the map the servers agree on.
func learned(t *testing.T, c *mutexd.Client, owners []*testserver.Server) {
	t.Helper()
	want := make([]string, len(owners))
	for p, s := range owners {
		want[p] = s.URL
	}
	within(t, 15*time.Second, "the client learned the map", func() bool {
		return strings.Join(mutexd.PartitionOwners(c), " ") == strings.Join(want, " ")
	})
}

func urlsOf(group []*testserver.Server) string {
	var urls []string
	for _, s := range group {
		urls = append(urls, s.URL)
	}
	return strings.Join(urls, ",")
}

// TestRequestsGoStraightToThePartitionsOwner: once the client has learned the map, its
// acquire, get, renew and release of names in every partition are each served by the
// server they were sent to, and no server forwards one.
func TestRequestsGoStraightToThePartitionsOwner(t *testing.T) {
	group := startGroup(t, 3, "--partitions", strconv.Itoa(partitions))
	owners := settledMap(t, group, 60*time.Second)
	c := newClient(t, urlsOf(group), &mutexd.Options{Timeout: 10 * time.Second})
	seen := watchAnswers(c)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// The first answer about a resource says the group is partitioned: the map is fetched.
	if mutexd.PartitionOwners(c) != nil {
		t.Fatal("a map before any answer")
	}
	if _, err := c.Get(ctx, name(t)); err != nil {
		t.Fatal(err)
	}
	learned(t, c, owners)
	if n := atomic.LoadInt64(&seen.fetches); n != 1 {
		t.Fatalf("the map was fetched %d times", n)
	}

	seen.reset()
	before := forwarded(t, group)
	for p, names := range namesIn(t, 2) {
		for _, res := range names {
			g, err := c.Acquire(ctx, res, &mutexd.AcquireOptions{TTL: 20 * time.Second})
			if err != nil {
				t.Fatalf("partition %d: %v", p, err)
			}
			st, err := c.Get(ctx, res)
			if err != nil || st.Holder == nil || st.Holder.FencingToken != g.FencingToken {
				t.Fatalf("partition %d: %+v %v", p, st, err)
			}
			if _, err := c.Renew(ctx, res, g.LeaseID, nil); err != nil {
				t.Fatalf("partition %d: %v", p, err)
			}
			if err := c.Release(ctx, res, g.LeaseID); err != nil {
				t.Fatalf("partition %d: %v", p, err)
			}
		}
	}
	seen.check(t, "steady state")
	if after := forwarded(t, group); after != before {
		t.Fatalf("the servers forwarded %d requests", after-before)
	}

	// Lock and its background renewal go to the owner as well.
	before = forwarded(t, group)
	res := namesIn(t, 1)[7][0]
	lease, err := c.Lock(ctx, res, &mutexd.LockOptions{TTL: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	within(t, 10*time.Second, "two renewals", func() bool { return lease.Renewals() >= 2 })
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	seen.check(t, "a lock")
	if after := forwarded(t, group); after != before {
		t.Fatalf("the servers forwarded %d of a lock's requests", after-before)
	}
	if n := atomic.LoadInt64(&seen.fetches); n != 1 {
		t.Fatalf("the map was fetched %d times in the steady state", n)
	}
}

// TestTheClientFollowsAPartitionWhoseOwnerLeaves: the owner of a partition the client holds
// a lease in stops (SIGTERM, handing its partitions to the others); renewals and the
// release of that lease succeed, and once the map is fetched again they go straight to the
// new owner. Many requests at once on the moving partition fetch the map about once a
// second, not once each.
func TestTheClientFollowsAPartitionWhoseOwnerLeaves(t *testing.T) {
	group := startGroup(t, 3, "--partitions", strconv.Itoa(partitions))
	owners := settledMap(t, group, 60*time.Second)
	c := newClient(t, urlsOf(group), &mutexd.Options{Timeout: 10 * time.Second})
	seen := watchAnswers(c)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if _, err := c.Get(ctx, name(t)); err != nil {
		t.Fatal(err)
	}
	learned(t, c, owners)

	// A lease in a partition of the server that leaves; it is not the first URL of the
	// client's list, so that a request sent there was routed.
	victim := group[1]
	p := -1
	for q, s := range owners {
		if s == victim {
			p = q
			break
		}
	}
	names := namesIn(t, 9)[p]
	res := names[0]
	g, err := c.Acquire(ctx, res, &mutexd.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}

	// Readers of the partition's other names keep asking while it moves.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var readErrs int64
	for _, other := range names[1:] {
		wg.Add(1)
		go func(other string) {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := c.Get(ctx, other); err != nil {
					atomic.AddInt64(&readErrs, 1)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}(other)
	}
	fetchesBefore := atomic.LoadInt64(&seen.fetches)
	moved := time.Now()
	victim.Stop() // hands its partitions over, then exits 0 (checked)
	if _, err := c.Renew(ctx, res, g.LeaseID, nil); err != nil {
		t.Fatalf("the first renewal after the owner left: %v", err)
	}
	next := settledMap(t, group, 60*time.Second)
	// The client learns again on the surprises of this partition's requests; those of the
	// other partitions that moved are learned on their own first requests.
	within(t, 15*time.Second, "the client learned the partition's new owner", func() bool {
		m := mutexd.PartitionOwners(c)
		return m != nil && m[p] == next[p].URL
	})
	close(stop)
	wg.Wait()
	elapsed := time.Since(moved)
	if n := atomic.LoadInt64(&readErrs); n > 0 {
		t.Errorf("%d reads failed while the partition moved", n)
	}
	fetches := atomic.LoadInt64(&seen.fetches) - fetchesBefore
	t.Logf("fetches of the map while the partition moved: %d in %v", fetches, elapsed)
	if fetches < 1 || float64(fetches) > elapsed.Seconds()/0.9+1 {
		t.Fatalf("the map was fetched %d times in %v", fetches, elapsed)
	}

	// Straight to the new owner: nothing is forwarded any more.
	seen.reset()
	before := forwarded(t, group)
	for i := 0; i < 3; i++ {
		if _, err := c.Renew(ctx, res, g.LeaseID, nil); err != nil {
			t.Fatal(err)
		}
		st, err := c.Get(ctx, res)
		if err != nil || st.Holder == nil || st.Holder.FencingToken != g.FencingToken {
			t.Fatalf("%+v %v", st, err)
		}
	}
	if err := c.Release(ctx, res, g.LeaseID); err != nil {
		t.Fatal(err)
	}
	seen.check(t, "after the move")
	if after := forwarded(t, group); after != before {
		t.Fatalf("the servers forwarded %d requests after the move", after-before)
	}
	if next[p] == victim || next[p] == nil {
		t.Fatalf("partition %d is still owned by the server that left", p)
	}
}

// namesUnder is per resource names under prefix in each partition.
func namesUnder(prefix string, per int) [][]string {
	out := make([][]string, partitions)
	for i, filled := 0, 0; filled < partitions; i++ {
		n := fmt.Sprintf("%sn%d", prefix, i)
		p := mutexd.PartitionOf(n, partitions)
		if len(out[p]) < per {
			out[p] = append(out[p], n)
			if len(out[p]) == per {
				filled++
			}
		}
	}
	return out
}

// TestListsAndEventsSpanThePartitions: a list's index and the events' next are positions
// there, passed back unchanged: a list watch asked of one server wakes on a change in a
// partition another owns, and paging the events gives every event of several partitions
// once, oldest first.
func TestListsAndEventsSpanThePartitions(t *testing.T) {
	group := startGroup(t, 3, "--partitions", strconv.Itoa(partitions))
	owners := settledMap(t, group, 60*time.Second)
	c := newClient(t, urlsOf(group), &mutexd.Options{Timeout: 10 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	t.Run("a list's index is a position", func(t *testing.T) {
		prefix := name(t) + "/"
		names := namesUnder(prefix, 1)
		var held []string
		for _, p := range []int{0, 5, 11} {
			if _, err := c.Acquire(ctx, names[p][0], &mutexd.AcquireOptions{TTL: 30 * time.Second}); err != nil {
				t.Fatal(err)
			}
			held = append(held, names[p][0])
		}
		sort.Strings(held)
		page, err := c.List(ctx, &mutexd.ListOptions{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		if got := resourceNames(page.Resources); strings.Join(got, " ") != strings.Join(held, " ") {
			t.Fatalf("listed %v, want %v", got, held)
		}
		if !strings.HasPrefix(string(page.Position), "v") || page.Index != 0 {
			t.Fatalf("index %d, position %q: want a position", page.Index, page.Position)
		}
		// Passed back unchanged: a list watch from it, answered when its wait runs out.
		start := time.Now()
		now, err := c.List(ctx, &mutexd.ListOptions{Prefix: prefix, Position: page.Position,
			Wait: 300 * time.Millisecond})
		if err != nil || now.Position != page.Position || time.Since(start) < 250*time.Millisecond {
			t.Fatalf("the watch: %+v %v after %v", now, err, time.Since(start))
		}
		all, pos, err := c.ListAllPosition(ctx, prefix)
		if err != nil || pos != page.Position || len(all) != len(held) {
			t.Fatalf("ListAllPosition: %d, %q, %v", len(all), pos, err)
		}
		// A number is the server's to refuse on a partitioned group.
		if _, err := c.List(ctx, &mutexd.ListOptions{Prefix: prefix, Index: 3}); !errors.Is(err, mutexd.ErrInvalidRequest) {
			t.Fatalf("a number as the index: %v", err)
		}
		ev, err := c.Events(ctx, &mutexd.EventsOptions{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(ev.NextPosition), "v") || len(ev.Events) != len(held) {
			t.Fatalf("events: next %q, %d events", ev.NextPosition, len(ev.Events))
		}
		for _, e := range ev.Events {
			if e.Type != "granted" || e.Partition == nil || *e.Partition != mutexd.PartitionOf(e.Resource, partitions) {
				t.Fatalf("event %+v", e)
			}
		}
		rest, err := c.Events(ctx, &mutexd.EventsOptions{Prefix: prefix, AfterPosition: ev.NextPosition})
		if err != nil || len(rest.Events) != 0 {
			t.Fatalf("after the last: %+v %v", rest, err)
		}
	})

	t.Run("a list watch wakes on a change another server owns", func(t *testing.T) {
		asked := group[0]
		prefix := name(t) + "/"
		names := namesUnder(prefix, 1)
		var elsewhere []string
		for p, s := range owners {
			if s.URL != asked.URL {
				elsewhere = append(elsewhere, names[p][0])
			}
		}
		if len(elsewhere) < 2 {
			t.Fatalf("the other servers own %d partitions", len(elsewhere))
		}
		watcher := newClient(t, asked.URL, &mutexd.Options{Timeout: 10 * time.Second})
		_, at, err := watcher.ListAllPosition(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		for i, res := range elsewhere[:2] {
			time.AfterFunc(500*time.Millisecond, func() {
				_, _ = c.Acquire(ctx, res, &mutexd.AcquireOptions{TTL: 30 * time.Second})
			})
			start := time.Now()
			page, err := watcher.List(ctx, &mutexd.ListOptions{Prefix: prefix, Position: at,
				Wait: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("woken after %v", d)
			}
			want := append([]string(nil), elsewhere[:i+1]...)
			sort.Strings(want)
			if got := resourceNames(page.Resources); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("listed %v, want %v", got, want)
			}
			if page.Position == at {
				t.Fatalf("the position %q did not move", at)
			}
			at = page.Position
		}
	})

	t.Run("the events page through every event of several partitions", func(t *testing.T) {
		prefix := name(t) + "/"
		names := namesUnder(prefix, 2)
		var done []string
		var used []string
		for _, p := range []int{1, 4, 7, 9, 14} {
			for _, res := range names[p] {
				g, err := c.Acquire(ctx, res, &mutexd.AcquireOptions{TTL: 30 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Release(ctx, res, g.LeaseID); err != nil {
					t.Fatal(err)
				}
				done = append(done, res+" granted", res+" released")
				used = append(used, res)
			}
		}
		var seen []mutexd.Event
		var after mutexd.Position
		for pages := 0; ; pages++ {
			if pages > 20 {
				t.Fatal("the events did not end")
			}
			p, err := c.Events(ctx, &mutexd.EventsOptions{Prefix: prefix, Limit: 3, AfterPosition: after})
			if err != nil {
				t.Fatal(err)
			}
			if p.Truncated {
				t.Fatal("truncated")
			}
			seen = append(seen, p.Events...)
			after = p.NextPosition
			if len(p.Events) < 3 {
				break
			}
		}
		var got []string
		once := map[string]bool{}
		for i, e := range seen {
			got = append(got, e.Resource+" "+e.Type)
			if e.Partition == nil || *e.Partition != mutexd.PartitionOf(e.Resource, partitions) {
				t.Fatalf("event %+v", e)
			}
			once[fmt.Sprintf("%d/%d", *e.Partition, e.Index)] = true
			// Oldest first: by time, then partition.
			if i > 0 {
				prev := seen[i-1]
				if e.At.Before(prev.At) || (e.At.Equal(prev.At) && *e.Partition < *prev.Partition) {
					t.Fatalf("event %d (%+v) before %d (%+v)", i, e, i-1, prev)
				}
			}
		}
		sort.Strings(got)
		sort.Strings(done)
		if strings.Join(got, "\n") != strings.Join(done, "\n") || len(once) != len(done) {
			t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(done, "\n"))
		}
		for _, res := range used {
			var kinds []string
			for _, e := range seen {
				if e.Resource == res {
					kinds = append(kinds, e.Type)
				}
			}
			if strings.Join(kinds, " ") != "granted released" {
				t.Fatalf("%s: %v", res, kinds)
			}
		}
		// Waited for: a change after them, in yet another partition, comes next.
		last := names[12][0]
		time.AfterFunc(500*time.Millisecond, func() {
			_, _ = c.Acquire(ctx, last, &mutexd.AcquireOptions{TTL: 30 * time.Second})
		})
		p, err := c.Events(ctx, &mutexd.EventsOptions{Prefix: prefix, AfterPosition: after, Wait: 20 * time.Second})
		if err != nil || len(p.Events) != 1 || p.Events[0].Resource != last || *p.Events[0].Partition != 12 {
			t.Fatalf("after the wait: %+v %v", p, err)
		}
	})
}

func resourceNames(states []mutexd.ResourceState) []string {
	var out []string
	for _, s := range states {
		out = append(out, s.Resource)
	}
	return out
}
