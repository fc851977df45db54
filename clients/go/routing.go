package mutexd

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// relearnInterval is the least time between two fetches of the partition map: when a
// partition moves, every request on it is a surprise at once, and one fetch serves them all.
const relearnInterval = time.Second

type mapState int

const (
	mapUnknown     mapState = iota // never learned, or every fetch so far failed
	mapFlat                        // the group is not partitioned: nothing is routed
	mapPartitioned                 // owners holds the owner of each partition
)

// partitionMap is what the client knows of its group's partitions (docs/api.md,
// "Partitions"). A partitioned group serves each resource on the owner of its partition;
// any other server forwards there. Sending straight to the owner saves that hop.
type partitionMap struct {
	mu       sync.Mutex
	state    mapState
	owners   []*server          // the owner of each partition; nil while none owns it
	others   map[string]*server // owners the client was not given, by key, kept for their connections
	fetching bool
	fetched  time.Time // when the last fetch started
}

// target is a server to send one attempt to, and its index in the client's list (-1: an
// owner the client was not given).
type target struct {
	s *server
	i int
}

// targets is the order of one round of attempts: the owner of the resource's partition
// first, when the map names one, then the client's servers from the one asked first,
// each once.
func (c *Client) targets(resource string) []target {
	n := len(c.servers)
	first := int(atomic.LoadInt32(&c.current))
	owner := c.ownerOf(resource)
	out := make([]target, 0, n+1)
	if owner != nil {
		out = append(out, target{owner, c.indexOf(owner)})
	}
	for a := 0; a < n; a++ {
		i := (first + a) % n
		if owner != nil && c.servers[i] == owner {
			continue
		}
		out = append(out, target{c.servers[i], i})
	}
	return out
}

// indexOf is the index of s in the client's list, or -1.
func (c *Client) indexOf(s *server) int {
	for i, x := range c.servers {
		if x == s {
			return i
		}
	}
	return -1
}

// ownerOf is the server that owns resource's partition, or nil: no resource, no map, or no
// owner at the moment.
func (c *Client) ownerOf(resource string) *server {
	if resource == "" {
		return nil
	}
	m := &c.pmap
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state != mapPartitioned {
		return nil
	}
	return m.owners[PartitionOf(resource, len(m.owners))]
}

// answered looks at an answer about a resource from s: the first sign of a partitioned
// group (a Mutexd-Partition header) has the map learned; an answer served by another
// server than s (the request was forwarded: the partition moved, or the map is not known)
// has it learned again.
func (c *Client) answered(s *server, h http.Header) {
	if h.Get("Mutexd-Partition") == "" {
		return
	}
	m := &c.pmap
	m.mu.Lock()
	state := m.state
	m.mu.Unlock()
	switch state {
	case mapUnknown:
		c.relearn()
	case mapPartitioned:
		if by := h.Get("Mutexd-Served-By"); by != "" && keyOf(by) != s.key {
			c.relearn()
		}
	}
}

// failed notes an attempt about a resource that got no answer, or a 503: in a partitioned
// group its owner may have moved.
func (c *Client) failed(h http.Header) {
	m := &c.pmap
	m.mu.Lock()
	state := m.state
	m.mu.Unlock()
	if state == mapPartitioned || state == mapUnknown && h != nil && h.Get("Mutexd-Partition") != "" {
		c.relearn()
	}
}

// relearn fetches the map in the background, unless a fetch is under way or one started
// less than relearnInterval ago. The request that asked for it goes on meanwhile, and a
// fetch that fails leaves the map as it was.
func (c *Client) relearn() {
	m := &c.pmap
	m.mu.Lock()
	if m.fetching || !m.fetched.IsZero() && time.Since(m.fetched) < relearnInterval {
		m.mu.Unlock()
		return
	}
	m.fetching, m.fetched = true, time.Now()
	m.mu.Unlock()
	go c.learn()
}

// learn fetches the map from the client's servers (GET /v1/servers) and puts it in force.
func (c *Client) learn() {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	v, err := c.Servers(ctx)
	m := &c.pmap
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fetching = false
	if err != nil {
		return
	}
	if v.Partitions == nil {
		m.state, m.owners = mapFlat, nil
		return
	}
	owners := make([]*server, v.Partitions.Count)
	for _, o := range v.Partitions.Owners {
		if o.URL != "" {
			owners[o.Partition] = c.serverFor(o.URL)
		}
	}
	m.state, m.owners = mapPartitioned, owners
}

// serverFor is the server of an owner's advertised URL: the client's own when it is one of
// its URLs, else one made for it (and kept, with its connections, for the next maps); nil
// for a URL that cannot be used. Called with pmap.mu held.
func (c *Client) serverFor(raw string) *server {
	key := keyOf(raw)
	if key == "" {
		return nil
	}
	for _, s := range c.servers {
		if s.key == key {
			return s
		}
	}
	m := &c.pmap
	if s := m.others[key]; s != nil {
		return s
	}
	s, err := newServer(strings.TrimSpace(raw), c.tlsConfig)
	if err != nil {
		return nil
	}
	if m.others == nil {
		m.others = map[string]*server{}
	}
	m.others[key] = s
	return s
}

// closeOthers closes the idle connections of the owners the client was not given.
func (c *Client) closeOthers() {
	m := &c.pmap
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.others {
		s.tr.CloseIdleConnections()
	}
}

// keyOf is the normalised form of a URL (see normalise), or "" when it is not one.
func keyOf(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Host == "" {
		return ""
	}
	return normalise(u)
}
