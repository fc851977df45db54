package mutexd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Several resources at once (docs/api.md, "Several resources at once"): one request
// acquires, renews or releases a lease on each of 2 to 64 resources, under one lease id.

type acquireManyBody struct {
	Resources []string `json:"resources"`
	acquireBody
}

type renewManyBody struct {
	Resources []string `json:"resources"`
	renewBody
}

type releaseManyBody struct {
	Resources []string `json:"resources"`
	LeaseID   string   `json:"lease_id"`
}

// checkNames refuses what cannot be a request about several resources: no name, or an
// empty one. The server checks the rest (2 to 64 names, each once, each valid).
func checkNames(resources []string) error {
	if len(resources) == 0 {
		return errors.New("mutexd: no resource named")
	}
	for _, r := range resources {
		if r == "" {
			return errors.New("mutexd: the resource must not be empty")
		}
	}
	return nil
}

// AcquireMany acquires a lease on every one of resources (2 to 64 names, each once), or
// on none, with one request (POST /v1/acquire). The options are Acquire's and apply to
// each lease. It returns the leases, one per resource in the order given, all with one
// lease id (opts.LeaseID, else a new one; sent again unchanged to the next server, so
// that a retry gets the same leases back), each with its own fencing token.
//
// With opts.Wait the request waits in the queue of every resource and is granted all at
// once when it heads each (no deadlock, whatever the order of the names in concurrent
// requests). The request goes to the server of the first name's partition: on a
// partitioned group every name must be in that partition (a hash tag, "{acct}/alice" and
// "{acct}/bob"), else ErrInvalidRequest (APIError.Field "resources"); see LockOrdered for
// names of different partitions.
//
// Errors: ErrLeaseHeld (nothing was granted; APIError.Resource is the first held in the
// order given, APIError.Holder who holds it), ErrLimitMismatch, ErrTooManyWaiters,
// ErrInvalidRequest, and those of every call.
func (c *Client) AcquireMany(ctx context.Context, resources []string, opts *AcquireOptions) ([]*Grant, error) {
	var o AcquireOptions
	if opts != nil {
		o = *opts
	}
	if err := checkNames(resources); err != nil {
		return nil, err
	}
	b, err := c.acquireBody(&o)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(acquireManyBody{Resources: resources, acquireBody: b})
	if err != nil {
		return nil, fmt.Errorf("mutexd: the metadata: %w", err)
	}
	sent := time.Now()
	resp, err := c.send(ctx, resources[0], "POST", "/v1/acquire", body,
		c.timeout+time.Duration(b.WaitMs)*time.Millisecond, time.Time{})
	if err != nil {
		return nil, err
	}
	base := sent
	if b.WaitMs > 0 {
		base = time.Now()
	}
	gs, err := decodeGrants(resp.body, resources, base)
	if err != nil {
		return nil, protocolError(resp, err)
	}
	return gs, nil
}

// RenewMany renews the leases of leaseID on every one of resources with one request
// (POST /v1/renew): each now expires its TTL (or opts.TTL) from now and keeps its fencing
// token. It returns the leases in the order given.
//
// Errors: ErrLeaseLost when the lease id no longer holds some of them (APIError.Resources
// names which; the others WERE renewed), ErrInvalidRequest, and those of every call.
func (c *Client) RenewMany(ctx context.Context, resources []string, leaseID string, opts *RenewOptions) ([]*Grant, error) {
	var o RenewOptions
	if opts != nil {
		o = *opts
	}
	if o.TTL < 0 || o.Timeout < 0 {
		return nil, durationError("TTL and Timeout")
	}
	if err := checkNames(resources); err != nil {
		return nil, err
	}
	b := renewManyBody{Resources: resources, renewBody: renewBody{LeaseID: leaseID, Metadata: metadataValue(o.Metadata)}}
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
	resp, err := c.send(ctx, resources[0], "POST", "/v1/renew", body, timeout, o.Deadline)
	if err != nil {
		return nil, err
	}
	gs, err := decodeGrants(resp.body, resources, sent)
	if err != nil {
		return nil, protocolError(resp, err)
	}
	return gs, nil
}

// ReleaseMany releases the leases of leaseID on every one of resources with one request
// (POST /v1/release); each resource's next waiters are granted at once.
//
// Error: ErrLeaseLost when the lease id no longer holds some of them (APIError.Resources
// names which; the others WERE released).
func (c *Client) ReleaseMany(ctx context.Context, resources []string, leaseID string) error {
	return c.releaseMany(ctx, resources, leaseID, c.timeout)
}

func (c *Client) releaseMany(ctx context.Context, resources []string, leaseID string, timeout time.Duration) error {
	if err := checkNames(resources); err != nil {
		return err
	}
	body, _ := json.Marshal(releaseManyBody{Resources: resources, LeaseID: leaseID})
	_, err := c.send(ctx, resources[0], "POST", "/v1/release", body, timeout, time.Time{})
	return err
}

// decodeGrants reads {"leases": [lease body...]}: one lease per name, in the order asked.
func decodeGrants(body []byte, resources []string, base time.Time) ([]*Grant, error) {
	var w struct {
		Leases *[]json.RawMessage `json:"leases"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, err
	}
	if w.Leases == nil {
		return nil, need("leases", false)
	}
	if len(*w.Leases) != len(resources) {
		return nil, fmt.Errorf("%d leases for %d resources", len(*w.Leases), len(resources))
	}
	out := make([]*Grant, len(resources))
	for i, raw := range *w.Leases {
		g, err := decodeGrant(raw, base)
		if err != nil {
			return nil, err
		}
		if g.Resource != resources[i] {
			return nil, fmt.Errorf("lease %d is on %q, not %q", i, g.Resource, resources[i])
		}
		if i > 0 && g.LeaseID != out[0].LeaseID {
			return nil, fmt.Errorf("the leases have different lease ids: %q and %q", out[0].LeaseID, g.LeaseID)
		}
		out[i] = g
	}
	return out, nil
}
