package mutexd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// AcquireOptions are the options of Acquire. The zero value acquires an exclusive lease
// of the server's default TTL, without waiting.
type AcquireOptions struct {
	// Owner is who holds the lease, for people and tools; default the client's owner.
	Owner string
	// TTL is the lease's time to live; 0: the server's default (15 s).
	TTL time.Duration
	// Wait is how long to wait in the resource's FIFO queue when it is held; 0: not at
	// all (ErrLeaseHeld at once).
	Wait time.Duration
	// LeaseID is the lease id to propose; default a new random UUID. Acquiring again with
	// the id of the resource's current lease returns that lease with a fresh TTL and the
	// same fencing token: the move to another server after a lost answer sends the same
	// id, and so gets the same lease.
	LeaseID string
	// Metadata is a value that marshals to a JSON object (at most 4096 bytes), stored with
	// the lease; for example the leader's address.
	Metadata interface{}
	// Limit is how many leases may hold the resource at once (1 to the server's
	// --max-holders); more than 1 makes it a counting semaphore. 0 sends none, which the
	// server reads as 1. Every acquirer must name the same limit while the resource has
	// holders, else ErrLimitMismatch.
	Limit int
	// Shared asks for a shared lease (a reader): shared leases hold the resource together
	// while no exclusive lease holds it. Only with a Limit of 1 or none.
	Shared bool
}

// The bodies of an acquire, a renewal and a release. Resources names the resources of a
// request about several; nil (not sent) for one, which the path names.
type acquireBody struct {
	Resources []string    `json:"resources,omitempty"`
	Owner     string      `json:"owner"`
	LeaseID   string      `json:"lease_id"`
	TTLMs     *int64      `json:"ttl_ms,omitempty"`
	WaitMs    int64       `json:"wait_ms,omitempty"`
	Metadata  interface{} `json:"metadata,omitempty"`
	Limit     *int        `json:"limit,omitempty"`
	Shared    bool        `json:"shared,omitempty"`
}

// acquireBody is the body of an acquire with the options o (a lease id proposed if none).
func (c *Client) acquireBody(o *AcquireOptions) (acquireBody, error) {
	if o.TTL < 0 {
		return acquireBody{}, durationError("TTL")
	}
	if o.Wait < 0 {
		return acquireBody{}, durationError("Wait")
	}
	b := acquireBody{Owner: o.Owner, LeaseID: o.LeaseID, WaitMs: toMs(o.Wait), Metadata: metadataValue(o.Metadata), Shared: o.Shared}
	if b.Owner == "" {
		b.Owner = c.owner
	}
	if b.LeaseID == "" {
		b.LeaseID = NewLeaseID()
	}
	if o.TTL > 0 {
		ttl := toMs(o.TTL)
		b.TTLMs = &ttl
	}
	// Sent only when asked for: without them the request means what it always meant.
	if o.Limit != 0 {
		b.Limit = &o.Limit
	}
	return b, nil
}

// metadataValue is v, or nil (nothing sent) for a nil json.RawMessage.
func metadataValue(v interface{}) interface{} {
	if raw, ok := v.(json.RawMessage); ok && raw == nil {
		return nil
	}
	return v
}

func durationError(name string) error {
	return fmt.Errorf("mutexd: %s must not be negative", name)
}

// subject is what a request is about: one resource (resources[0]), its path its own, or
// (many) every one of resources, named in the body of a request to /v1/.
type subject struct {
	route string   // the name the request is routed by (Client.send's resource)
	path  string   // the request's path
	names []string // the resources named in the body; nil for one resource
}

// newSubject is the subject of the operation op (acquire, renew, release) on resources[0]
// or, many, on every one of resources.
func newSubject(resources []string, many bool, op string) (subject, error) {
	if many {
		if err := checkNames(resources); err != nil {
			return subject{}, err
		}
		return subject{route: resources[0], path: "/v1/" + op, names: resources}, nil
	}
	path, err := resourcePath(resources[0])
	if err != nil {
		return subject{}, err
	}
	return subject{route: resources[0], path: path + "/" + op}, nil
}

// decode reads an answer's leases: its lease, or one per name in the order asked.
func (sub subject) decode(body []byte, base time.Time) ([]*Grant, error) {
	if sub.names != nil {
		return decodeGrants(body, sub.names, base)
	}
	g, err := decodeGrant(body, base)
	if err != nil {
		return nil, err
	}
	return []*Grant{g}, nil
}

// Acquire acquires a lease on resource (POST /v1/resources/{resource}/acquire). It
// always proposes a lease id (opts.LeaseID, else a new one), and sends the same one to
// the next server when a server gives no usable answer: an acquire granted by a server
// whose answer was lost gets its own lease back from the next one.
//
// Errors: ErrLeaseHeld (APIError.Holder says who holds it, APIError.RetryAfter when its
// lease ends), ErrLimitMismatch, ErrTooManyWaiters, ErrInvalidRequest, and those of every
// call (ErrTransport, ErrUnavailable, the context's).
func (c *Client) Acquire(ctx context.Context, resource string, opts *AcquireOptions) (*Grant, error) {
	gs, err := c.acquire(ctx, []string{resource}, false, opts)
	if err != nil {
		return nil, err
	}
	return gs[0], nil
}

// acquire is Acquire (on resources[0]) or, many, AcquireMany.
func (c *Client) acquire(ctx context.Context, resources []string, many bool, opts *AcquireOptions) ([]*Grant, error) {
	var o AcquireOptions
	if opts != nil {
		o = *opts
	}
	sub, err := newSubject(resources, many, "acquire")
	if err != nil {
		return nil, err
	}
	b, err := c.acquireBody(&o)
	if err != nil {
		return nil, err
	}
	b.Resources = sub.names
	body, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("mutexd: the metadata: %w", err)
	}
	sent := time.Now()
	resp, err := c.send(ctx, sub.route, "POST", sub.path, body, c.timeout+time.Duration(b.WaitMs)*time.Millisecond, time.Time{})
	if err != nil {
		return nil, err
	}
	// The lease's time runs from the grant: at the latest when the request was sent, or,
	// after a wait in the queue, when the answer arrived.
	base := sent
	if b.WaitMs > 0 {
		base = time.Now()
	}
	gs, err := sub.decode(resp.body, base)
	if err != nil {
		return nil, protocolError(resp, err)
	}
	return gs, nil
}

// RenewOptions are the options of Renew.
type RenewOptions struct {
	// TTL: the lease now expires TTL from now; 0: its own TTL.
	TTL time.Duration
	// Metadata, if not nil, replaces the lease's.
	Metadata interface{}
	// Timeout bounds each attempt; 0: the client's.
	Timeout time.Duration
	// Deadline, if not zero, bounds the whole call (for example Grant.Deadline): no
	// attempt, on any server, is started or lasts past it; the error is then ErrTimeout
	// (or the last attempt's).
	Deadline time.Time
}

type renewBody struct {
	Resources []string    `json:"resources,omitempty"`
	LeaseID   string      `json:"lease_id"`
	TTLMs     *int64      `json:"ttl_ms,omitempty"`
	Metadata  interface{} `json:"metadata,omitempty"`
}

// Renew renews a lease (POST .../renew): it now expires its TTL from now and keeps its
// fencing token. It succeeds also after the lease expired, as long as no other lease was
// granted since. Errors: ErrLeaseLost (the lease is no longer the resource's),
// ErrInvalidRequest.
func (c *Client) Renew(ctx context.Context, resource, leaseID string, opts *RenewOptions) (*Grant, error) {
	gs, err := c.renew(ctx, []string{resource}, false, leaseID, opts)
	if err != nil {
		return nil, err
	}
	return gs[0], nil
}

// renew is Renew (of the lease on resources[0]) or, many, RenewMany.
func (c *Client) renew(ctx context.Context, resources []string, many bool, leaseID string, opts *RenewOptions) ([]*Grant, error) {
	var o RenewOptions
	if opts != nil {
		o = *opts
	}
	if o.TTL < 0 || o.Timeout < 0 {
		return nil, durationError("TTL and Timeout")
	}
	sub, err := newSubject(resources, many, "renew")
	if err != nil {
		return nil, err
	}
	b := renewBody{Resources: sub.names, LeaseID: leaseID, Metadata: metadataValue(o.Metadata)}
	if o.TTL > 0 {
		ttl := toMs(o.TTL)
		b.TTLMs = &ttl
	}
	body, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("mutexd: the metadata: %w", err)
	}
	timeout := o.Timeout
	if timeout == 0 {
		timeout = c.timeout
	}
	sent := time.Now()
	resp, err := c.send(ctx, sub.route, "POST", sub.path, body, timeout, o.Deadline)
	if err != nil {
		return nil, err
	}
	gs, err := sub.decode(resp.body, sent)
	if err != nil {
		return nil, protocolError(resp, err)
	}
	return gs, nil
}

// Release releases a lease (POST .../release); the resource's next waiters are granted
// at once. Error: ErrLeaseLost (the lease is no longer the resource's; the current holder,
// if any, keeps its lease).
func (c *Client) Release(ctx context.Context, resource, leaseID string) error {
	return c.release(ctx, []string{resource}, false, leaseID)
}

type releaseBody struct {
	Resources []string `json:"resources,omitempty"`
	LeaseID   string   `json:"lease_id"`
}

// release is Release (of the lease on resources[0]) or, many, ReleaseMany.
func (c *Client) release(ctx context.Context, resources []string, many bool, leaseID string) error {
	sub, err := newSubject(resources, many, "release")
	if err != nil {
		return err
	}
	body, _ := json.Marshal(releaseBody{Resources: sub.names, LeaseID: leaseID})
	_, err = c.send(ctx, sub.route, "POST", sub.path, body, c.timeout, time.Time{})
	return err
}

// BreakOptions are the options of Break.
type BreakOptions struct {
	// Reason is logged by the server.
	Reason string
	// LeaseID, if set, ends only that lease of the resource (one place of a semaphore);
	// else every lease of it ends.
	LeaseID string
}

// Break ends the resource's leases, whoever holds them (an operator's tool; it needs the
// admin scope when authorization is on): every one, or only opts.LeaseID's. It reports
// whether a lease was ended.
func (c *Client) Break(ctx context.Context, resource string, opts *BreakOptions) (bool, error) {
	path, err := resourcePath(resource)
	if err != nil {
		return false, err
	}
	b := map[string]string{}
	if opts != nil && opts.Reason != "" {
		b["reason"] = opts.Reason
	}
	if opts != nil && opts.LeaseID != "" {
		b["lease_id"] = opts.LeaseID
	}
	body, _ := json.Marshal(b)
	resp, err := c.send(ctx, resource, "POST", path+"/break", body, c.timeout, time.Time{})
	if err != nil {
		return false, err
	}
	var w struct {
		Broken *bool `json:"broken"`
	}
	if err := json.Unmarshal(resp.body, &w); err != nil || w.Broken == nil {
		return false, protocolError(resp, errors.New(`no "broken"`))
	}
	return *w.Broken, nil
}

// get sends a GET; resource is Client.send's.
func (c *Client) get(ctx context.Context, resource, path string, wait time.Duration) (*response, error) {
	return c.send(ctx, resource, "GET", path, nil, c.timeout+wait, time.Time{})
}

// Get returns the state of resource (a name never used is simply free).
func (c *Client) Get(ctx context.Context, resource string) (*ResourceState, error) {
	return c.Watch(ctx, resource, 0, 0)
}

// Watch waits until the state of resource differs from index (the Index of the state
// last seen), or wait passes, and returns the state then (unchanged when the wait ran
// out). wait is at most the server's --max-wait-ms (default 300 s). With wait 0 it is Get.
func (c *Client) Watch(ctx context.Context, resource string, index uint64, wait time.Duration) (*ResourceState, error) {
	path, err := resourcePath(resource)
	if err != nil {
		return nil, err
	}
	if wait < 0 {
		return nil, durationError("wait")
	}
	if wait > 0 {
		path += query("index", strconv.FormatUint(index, 10), "wait_ms", strconv.FormatInt(toMs(wait), 10))
	}
	resp, err := c.get(ctx, resource, path, wait)
	if err != nil {
		return nil, err
	}
	s, err := decodeState(resp.body)
	if err != nil {
		return nil, protocolError(resp, err)
	}
	return s, nil
}

// ListOptions are the options of List.
type ListOptions struct {
	// Prefix: only the resources whose name starts with it.
	Prefix string
	// Limit is the page's size (server default 100, at most 1000); 0: the server's.
	Limit int
	// Cursor is the NextCursor of the previous page.
	Cursor string
	// Index and Wait make it a list watch: the answer comes once a resource under Prefix
	// changed after the change index Index (a grant, renewal, release, break or expiry;
	// also when it becomes free and leaves the list), or when Wait ran out.
	Index uint64
	Wait  time.Duration
	// Position, when set, is the watch's start instead of Index: a page's Position, passed
	// unchanged. On a partitioned group it is the only one (the server refuses an Index).
	Position Position
}

// List returns one page of the held resources, in name order (GET /v1/resources); with
// opts.Wait, a list watch. Pass the page's Index as the next watch's Index, or its
// Position as the next watch's Position (on every group, a partitioned one too).
func (c *Client) List(ctx context.Context, opts *ListOptions) (*ResourcePage, error) {
	var o ListOptions
	if opts != nil {
		o = *opts
	}
	if o.Wait < 0 {
		return nil, durationError("Wait")
	}
	var limit, index, wait string
	if o.Limit != 0 {
		limit = strconv.Itoa(o.Limit)
	}
	if o.Position != "" {
		index = string(o.Position)
		wait = strconv.FormatInt(toMs(o.Wait), 10)
	} else if o.Wait > 0 || o.Index > 0 {
		index = strconv.FormatUint(o.Index, 10)
		wait = strconv.FormatInt(toMs(o.Wait), 10)
	}
	path := "/v1/resources" + query("prefix", o.Prefix, "limit", limit, "cursor", o.Cursor,
		"index", index, "wait_ms", wait)
	resp, err := c.get(ctx, "", path, o.Wait)
	if err != nil {
		return nil, err
	}
	p, err := decodePage(resp.body)
	if err != nil {
		return nil, protocolError(resp, err)
	}
	return p, nil
}

// ListAll returns every held resource whose name starts with prefix, in name order,
// reading page after page; and the change index of the first page (0 on a partitioned
// group: see ListAllPosition).
func (c *Client) ListAll(ctx context.Context, prefix string) ([]ResourceState, uint64, error) {
	all, first, err := c.listAll(ctx, prefix)
	if err != nil {
		return nil, 0, err
	}
	return all, first.Index, nil
}

// ListAllPosition is ListAll with the first page's Position: a list watch from it
// (ListOptions.Position) works on every group, a partitioned one too.
func (c *Client) ListAllPosition(ctx context.Context, prefix string) ([]ResourceState, Position, error) {
	all, first, err := c.listAll(ctx, prefix)
	if err != nil {
		return nil, "", err
	}
	return all, first.Position, nil
}

// listAll reads every page; it returns the first, whose index the list is read at.
func (c *Client) listAll(ctx context.Context, prefix string) ([]ResourceState, *ResourcePage, error) {
	var all []ResourceState
	o := ListOptions{Prefix: prefix, Limit: 1000}
	var first *ResourcePage
	for {
		p, err := c.List(ctx, &o)
		if err != nil {
			return nil, nil, err
		}
		if first == nil {
			first = p
		}
		all = append(all, p.Resources...)
		if p.NextCursor == "" {
			return all, first, nil
		}
		o.Cursor = p.NextCursor
	}
}

// EventsOptions are the options of Events.
type EventsOptions struct {
	// After: the changes after this change index (0: the oldest the server keeps).
	After uint64
	// AfterPosition, when set, is used instead of After: a page's NextPosition, passed
	// unchanged. On a partitioned group it is the only one (the server refuses an After
	// other than 0).
	AfterPosition Position
	// Prefix: only the changes of resources whose name starts with it.
	Prefix string
	// Limit: at most this many (server default 100, at most 1000); 0: the server's.
	Limit int
	// Wait: when there is none yet, wait up to this long for one.
	Wait time.Duration
}

// Events returns the recent changes after opts.After, oldest first (GET /v1/events).
// Pass the page's Next as the next After, or its NextPosition as the next AfterPosition
// (on every group, a partitioned one too). Truncated says that changes after After were
// dropped already (the server keeps its last --event-history, and starts afresh on a
// restart): some were missed.
func (c *Client) Events(ctx context.Context, opts *EventsOptions) (*EventPage, error) {
	var o EventsOptions
	if opts != nil {
		o = *opts
	}
	if o.Wait < 0 {
		return nil, durationError("Wait")
	}
	var limit, wait string
	if o.Limit != 0 {
		limit = strconv.Itoa(o.Limit)
	}
	if o.Wait > 0 {
		wait = strconv.FormatInt(toMs(o.Wait), 10)
	}
	// After 0 is the server's default, so it goes unsaid: a partitioned group refuses the
	// number.
	after := string(o.AfterPosition)
	if after == "" && o.After > 0 {
		after = strconv.FormatUint(o.After, 10)
	}
	path := "/v1/events" + query("after", after, "prefix", o.Prefix, "limit", limit,
		"wait_ms", wait)
	resp, err := c.get(ctx, "", path, o.Wait)
	if err != nil {
		return nil, err
	}
	p, err := decodeEvents(resp.body)
	if err != nil {
		return nil, protocolError(resp, err)
	}
	return p, nil
}

// WhoAmI returns the name and scopes of the client's token as the server sees it (with
// authorization off: no name, and every scope). No or a bad token: ErrUnauthorized.
func (c *Client) WhoAmI(ctx context.Context) (*WhoAmI, error) {
	resp, err := c.get(ctx, "", "/v1/whoami", 0)
	if err != nil {
		return nil, err
	}
	w, err := decodeWhoAmI(resp.body)
	if err != nil {
		return nil, protocolError(resp, err)
	}
	return w, nil
}

// Servers returns a server's view of its group (GET /v1/servers): itself, the active
// server and every server, with their roles and lags.
func (c *Client) Servers(ctx context.Context) (*Servers, error) {
	resp, err := c.get(ctx, "", "/v1/servers", 0)
	if err != nil {
		return nil, err
	}
	s, err := decodeServers(resp.body)
	if err != nil {
		return nil, protocolError(resp, err)
	}
	return s, nil
}
