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
	return c.acquire(ctx, resources, true, opts)
}

// RenewMany renews the leases of leaseID on every one of resources with one request
// (POST /v1/renew): each now expires its TTL (or opts.TTL) from now and keeps its fencing
// token. It returns the leases in the order given.
//
// Errors: ErrLeaseLost when the lease id no longer holds some of them (APIError.Resources
// names which; the others WERE renewed), ErrInvalidRequest, and those of every call.
func (c *Client) RenewMany(ctx context.Context, resources []string, leaseID string, opts *RenewOptions) ([]*Grant, error) {
	return c.renew(ctx, resources, true, leaseID, opts)
}

// ReleaseMany releases the leases of leaseID on every one of resources with one request
// (POST /v1/release); each resource's next waiters are granted at once.
//
// Error: ErrLeaseLost when the lease id no longer holds some of them (APIError.Resources
// names which; the others WERE released).
func (c *Client) ReleaseMany(ctx context.Context, resources []string, leaseID string) error {
	return c.release(ctx, resources, true, leaseID)
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
