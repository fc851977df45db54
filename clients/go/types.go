package mutexd

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Grant is a lease as acquire and renew answer it. LeaseID is the credential: whoever
// knows it can renew and release the lease.
//
// TTL and ExpiresIn are the lease's time to live and its remaining time when the server
// answered; AcquiredAt and RenewedAt are the server's wall-clock times, informative only.
// Deadline is this process's time (with a monotonic clock reading) at which the lease
// ends unless renewed: ExpiresIn counted from when the request was sent (so never later
// than the server's own deadline), or from when the answer arrived for an acquire that
// waited in the queue.
type Grant struct {
	Resource     string
	LeaseID      string
	Owner        string
	FencingToken uint64
	TTL          time.Duration
	ExpiresIn    time.Duration
	AcquiredAt   time.Time
	RenewedAt    time.Time
	// Metadata is the JSON object stored with the lease, or nil.
	Metadata json.RawMessage
	// Limit is how many leases may hold the resource at once (more than 1: a semaphore).
	Limit int
	// Shared says whether this is a shared lease (a reader).
	Shared   bool
	Deadline time.Time
}

// LeaseHolder is who holds a resource, as a lease_held answer says (APIError.Holder).
type LeaseHolder struct {
	Owner        string
	FencingToken uint64
	ExpiresIn    time.Duration
}

// UnmarshalJSON reads the holder object of a lease_held answer.
func (h *LeaseHolder) UnmarshalJSON(b []byte) error {
	var w struct {
		Owner        string `json:"owner"`
		FencingToken uint64 `json:"fencing_token"`
		ExpiresInMs  int64  `json:"expires_in_ms"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*h = LeaseHolder{Owner: w.Owner, FencingToken: w.FencingToken, ExpiresIn: ms(w.ExpiresInMs)}
	return nil
}

// Holder is a lease holding a resource as Get, Watch and List show it (never with its
// lease id).
type Holder struct {
	Owner        string
	FencingToken uint64
	Shared       bool
	TTL          time.Duration
	ExpiresIn    time.Duration
	AcquiredAt   time.Time
	RenewedAt    time.Time
	Metadata     json.RawMessage
}

// ResourceState is the state of one resource. Index increases on every change of the
// resource (grant, renewal, release, break, expiry): pass it to Watch to wait for the
// next. Holders is every lease holding it, oldest grant first; Holder the first of them,
// or nil. Limit is the limit in force (1 when free).
type ResourceState struct {
	Resource string
	State    string // "held" or "free"
	Index    uint64
	Holder   *Holder
	Holders  []Holder
	Limit    int
	Waiters  int
}

// Held reports whether a lease holds the resource.
func (s *ResourceState) Held() bool { return s.State == "held" }

// Position is where a list watch or the events stand, as the server said it: the change
// index in decimal on a lone server or a group of one partition, an opaque string on a
// partitioned group (--partitions N, N > 1), where one number cannot order the changes of
// every partition. Pass it back unchanged (ListOptions.Position, EventsOptions.AfterPosition);
// it works on every group, where the number fields work only on the first two.
type Position string

// ResourcePage is one answer of List: held resources in name order, the cursor of the
// next page ("" on the last) and Index, the server's change index when it was read (a
// list watch waits for a change after it). Position is the same as the server said it:
// on a partitioned group, where Index is 0, the only one to watch from.
type ResourcePage struct {
	Resources  []ResourceState
	NextCursor string
	Index      uint64
	Position   Position
}

// Event is one recent change of a resource (never with a lease id). Type is "granted",
// "renewed", "released", "expired" or "broken"; Index the change's index (pass it as
// After to read what came next); At the server's time, informative only. On a partitioned
// group Partition is the resource's partition (nil elsewhere) and Index that partition's
// change index: there the events are read on from a page's NextPosition.
type Event struct {
	Index        uint64
	At           time.Time
	Resource     string
	Type         string
	Owner        string
	FencingToken uint64
	Shared       bool
	Limit        int
	Partition    *int
}

// EventPage is one answer of Events: the events oldest first, Next (the After of the
// next request) and Truncated: events after the After asked for were dropped already
// (the server keeps the last --event-history only, and starts afresh on a restart), so
// some were missed. NextPosition is Next as the server said it: on a partitioned group,
// where Next is 0, the only one to read on from (as EventsOptions.AfterPosition).
type EventPage struct {
	Events       []Event
	Next         uint64
	NextPosition Position
	Truncated    bool
}

// WhoAmI is the client's token as the server sees it: its name in the tokens file ("" with
// authorization off) and its scopes.
type WhoAmI struct {
	Name   string
	Scopes []string
}

// HasScope reports whether the token has scope.
func (w *WhoAmI) HasScope(scope string) bool {
	for _, s := range w.Scopes {
		if s == scope {
			return true
		}
	}
	return false
}

// ServerInfo is one server of a group, as GET /v1/servers lists it.
type ServerInfo struct {
	URL        string
	Role       string // "active", "standby" or "joining"; "alone" without --ha
	LagChanges uint64
	Lag        time.Duration
	SeenAt     time.Time
}

// ActiveInfo is a group's active server.
type ActiveInfo struct {
	URL        string
	Since      time.Time
	Generation uint64
}

// PartitionOwner is the server that serves one partition of a partitioned group.
type PartitionOwner struct {
	Partition  int
	URL        string // the owner's advertised URL; "" while no server owns it
	Generation uint64
	Since      time.Time
}

// PartitionMap is a partitioned group's map: how many partitions, and who owns each.
type PartitionMap struct {
	Count  int
	Owners []PartitionOwner // one per partition, in partition order
}

// Servers is a server's view of its group (GET /v1/servers): itself, the active server
// (nil during a takeover, and in a partitioned group) and every server; and, in a
// partitioned group (--partitions N, N > 1), the partition map.
type Servers struct {
	Self       ServerInfo
	Active     *ActiveInfo
	Servers    []ServerInfo
	Partitions *PartitionMap // nil: not partitioned
}

// ---- decoding ------------------------------------------------------------------------

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

func parseTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

func metadata(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}

func limitOr1(v *int) int {
	if v == nil {
		return 1
	}
	return *v
}

var errMissing = errors.New("a field is missing")

func need(name string, present bool) error {
	if !present {
		return fmt.Errorf("the answer has no %q", name)
	}
	return nil
}

type wireLease struct {
	Resource     string          `json:"resource"`
	LeaseID      string          `json:"lease_id"`
	Owner        string          `json:"owner"`
	FencingToken *uint64         `json:"fencing_token"`
	TTLMs        *int64          `json:"ttl_ms"`
	ExpiresInMs  *int64          `json:"expires_in_ms"`
	AcquiredAt   string          `json:"acquired_at"`
	RenewedAt    string          `json:"renewed_at"`
	Metadata     json.RawMessage `json:"metadata"`
	Limit        *int            `json:"limit"`
	Shared       bool            `json:"shared"`
}

func decodeGrant(body []byte, base time.Time) (*Grant, error) {
	var w wireLease
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, err
	}
	for _, e := range []error{need("fencing_token", w.FencingToken != nil),
		need("ttl_ms", w.TTLMs != nil), need("expires_in_ms", w.ExpiresInMs != nil),
		need("lease_id", w.LeaseID != "")} {
		if e != nil {
			return nil, e
		}
	}
	expires := ms(*w.ExpiresInMs)
	return &Grant{
		Resource:     w.Resource,
		LeaseID:      w.LeaseID,
		Owner:        w.Owner,
		FencingToken: *w.FencingToken,
		TTL:          ms(*w.TTLMs),
		ExpiresIn:    expires,
		AcquiredAt:   parseTime(w.AcquiredAt),
		RenewedAt:    parseTime(w.RenewedAt),
		Metadata:     metadata(w.Metadata),
		Limit:        limitOr1(w.Limit),
		Shared:       w.Shared,
		Deadline:     base.Add(expires),
	}, nil
}

type wireHolder struct {
	Owner        string          `json:"owner"`
	FencingToken *uint64         `json:"fencing_token"`
	Shared       bool            `json:"shared"`
	TTLMs        int64           `json:"ttl_ms"`
	ExpiresInMs  int64           `json:"expires_in_ms"`
	AcquiredAt   string          `json:"acquired_at"`
	RenewedAt    string          `json:"renewed_at"`
	Metadata     json.RawMessage `json:"metadata"`
}

func (w *wireHolder) holder() (Holder, error) {
	if w.FencingToken == nil {
		return Holder{}, need("fencing_token", false)
	}
	return Holder{
		Owner:        w.Owner,
		FencingToken: *w.FencingToken,
		Shared:       w.Shared,
		TTL:          ms(w.TTLMs),
		ExpiresIn:    ms(w.ExpiresInMs),
		AcquiredAt:   parseTime(w.AcquiredAt),
		RenewedAt:    parseTime(w.RenewedAt),
		Metadata:     metadata(w.Metadata),
	}, nil
}

type wireState struct {
	Resource string        `json:"resource"`
	State    string        `json:"state"`
	Index    *uint64       `json:"index"`
	Holder   *wireHolder   `json:"holder"`
	Holders  *[]wireHolder `json:"holders"`
	Limit    *int          `json:"limit"`
	Waiters  int           `json:"waiters"`
}

func (w *wireState) state() (ResourceState, error) {
	if w.Index == nil {
		return ResourceState{}, need("index", false)
	}
	if w.State != "held" && w.State != "free" {
		return ResourceState{}, fmt.Errorf("the answer's state is %q", w.State)
	}
	s := ResourceState{Resource: w.Resource, State: w.State, Index: *w.Index,
		Limit: limitOr1(w.Limit), Waiters: w.Waiters}
	if w.Holder != nil {
		h, err := w.Holder.holder()
		if err != nil {
			return s, err
		}
		s.Holder = &h
	}
	if w.Holders == nil { // a server without semaphores: the one holder, if any
		if s.Holder != nil {
			s.Holders = []Holder{*s.Holder}
		}
	} else {
		s.Holders = make([]Holder, 0, len(*w.Holders))
		for i := range *w.Holders {
			h, err := (*w.Holders)[i].holder()
			if err != nil {
				return s, err
			}
			s.Holders = append(s.Holders, h)
		}
	}
	return s, nil
}

func decodeState(body []byte) (*ResourceState, error) {
	var w wireState
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, err
	}
	s, err := w.state()
	if err != nil {
		return nil, err
	}
	return &s, nil
}

func decodePage(body []byte) (*ResourcePage, error) {
	var w struct {
		Resources  *[]wireState    `json:"resources"`
		NextCursor *string         `json:"next_cursor"`
		Index      json.RawMessage `json:"index"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, err
	}
	if w.Resources == nil {
		return nil, need("resources", false)
	}
	index, pos, err := decodePosition(w.Index)
	if err != nil {
		return nil, err
	}
	p := &ResourcePage{Resources: make([]ResourceState, 0, len(*w.Resources)), Index: index,
		Position: pos}
	if w.NextCursor != nil {
		p.NextCursor = *w.NextCursor
	}
	for i := range *w.Resources {
		s, err := (*w.Resources)[i].state()
		if err != nil {
			return nil, err
		}
		p.Resources = append(p.Resources, s)
	}
	return p, nil
}

func decodeEvents(body []byte) (*EventPage, error) {
	var w struct {
		Events *[]struct {
			Index        *uint64 `json:"index"`
			At           string  `json:"at"`
			Resource     string  `json:"resource"`
			Type         string  `json:"type"`
			Owner        string  `json:"owner"`
			FencingToken uint64  `json:"fencing_token"`
			Shared       bool    `json:"shared"`
			Limit        *int    `json:"limit"`
			Partition    *int    `json:"partition"`
		} `json:"events"`
		Next      json.RawMessage `json:"next"`
		Truncated bool            `json:"truncated"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, err
	}
	if w.Events == nil || w.Next == nil {
		return nil, need("events", false)
	}
	next, pos, err := decodePosition(w.Next)
	if err != nil {
		return nil, err
	}
	if pos == "" {
		return nil, need("next", false)
	}
	p := &EventPage{Events: make([]Event, 0, len(*w.Events)), Next: next, NextPosition: pos,
		Truncated: w.Truncated}
	for _, e := range *w.Events {
		if e.Index == nil || e.Type == "" {
			return nil, errMissing
		}
		p.Events = append(p.Events, Event{Index: *e.Index, At: parseTime(e.At), Resource: e.Resource,
			Type: e.Type, Owner: e.Owner, FencingToken: e.FencingToken, Shared: e.Shared,
			Limit: limitOr1(e.Limit), Partition: e.Partition})
	}
	return p, nil
}

// decodePosition reads a list's index or the events' next: a number (given as both) or a
// partitioned group's position (a string; the number is 0 then). Absent or null: both
// empty.
func decodePosition(raw json.RawMessage) (uint64, Position, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, "", err
		}
		if s == "" {
			return 0, "", errors.New("an empty position")
		}
		return 0, Position(s), nil
	}
	var n uint64
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, "", err
	}
	return n, Position(strconv.FormatUint(n, 10)), nil
}

func decodeWhoAmI(body []byte) (*WhoAmI, error) {
	var w struct {
		Name   *string   `json:"name"`
		Scopes *[]string `json:"scopes"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, err
	}
	if w.Scopes == nil {
		return nil, need("scopes", false)
	}
	who := &WhoAmI{Scopes: *w.Scopes}
	if w.Name != nil {
		who.Name = *w.Name
	}
	return who, nil
}

type wireServer struct {
	URL        string `json:"url"`
	Role       string `json:"role"`
	LagChanges uint64 `json:"lag_changes"`
	LagMs      int64  `json:"lag_ms"`
	SeenAt     string `json:"seen_at"`
}

func (w wireServer) info() ServerInfo {
	return ServerInfo{URL: w.URL, Role: w.Role, LagChanges: w.LagChanges, Lag: ms(w.LagMs),
		SeenAt: parseTime(w.SeenAt)}
}

func decodeServers(body []byte) (*Servers, error) {
	var w struct {
		Self   *wireServer `json:"self"`
		Active *struct {
			URL        string `json:"url"`
			Since      string `json:"since"`
			Generation uint64 `json:"generation"`
		} `json:"active"`
		Servers    []wireServer `json:"servers"`
		Partitions *struct {
			Count  int `json:"count"`
			Owners []struct {
				Partition  int     `json:"partition"`
				URL        *string `json:"url"`
				Generation uint64  `json:"generation"`
				Since      string  `json:"since"`
			} `json:"owners"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, err
	}
	if w.Self == nil {
		return nil, need("self", false)
	}
	s := &Servers{Self: w.Self.info()}
	if w.Active != nil {
		s.Active = &ActiveInfo{URL: w.Active.URL, Since: parseTime(w.Active.Since),
			Generation: w.Active.Generation}
	}
	for _, x := range w.Servers {
		s.Servers = append(s.Servers, x.info())
	}
	// A map of one partition is no partitioning: left out, as a lone server leaves it out.
	if p := w.Partitions; p != nil && p.Count > 1 {
		if p.Count > maxPartitions {
			return nil, fmt.Errorf("%d partitions, more than %d", p.Count, maxPartitions)
		}
		m := &PartitionMap{Count: p.Count, Owners: make([]PartitionOwner, p.Count)}
		for i := range m.Owners {
			m.Owners[i].Partition = i
		}
		for _, o := range p.Owners {
			if o.Partition < 0 || o.Partition >= p.Count {
				return nil, fmt.Errorf("an owner of partition %d of %d", o.Partition, p.Count)
			}
			e := &m.Owners[o.Partition]
			if o.URL != nil {
				e.URL = *o.URL
			}
			e.Generation, e.Since = o.Generation, parseTime(o.Since)
		}
		s.Partitions = m
	}
	return s, nil
}
