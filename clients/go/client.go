package mutexd

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// Version is the client's version, sent in its User-Agent.
const Version = "0.1.0"

// DefaultURL is the server when neither New nor MUTEXD_URL names one.
const DefaultURL = "http://127.0.0.1:8080"

// DefaultTimeout bounds each request (beyond any wait it asks the server for) when
// Options.Timeout is 0.
const DefaultTimeout = 10 * time.Second

const (
	// The pause before a call goes round its servers again after 503 answers: their
	// Retry-After, at most this long, at least the other.
	retryAfterCap = 2 * time.Second
	retryAfterMin = 100 * time.Millisecond
	// Answers larger than this are refused (a page of 1000 resources with 4 KiB of
	// metadata each is about 4.5 MiB).
	maxAnswerBytes = 64 << 20
	// An idle connection is closed before the server's own idle timeout (60 s) would
	// close it under a request being sent.
	idleConnTimeout = 30 * time.Second
)

// Options configure a Client. The zero value is valid.
type Options struct {
	// Token is sent as "Authorization: Bearer <token>" with every request.
	Token string
	// CAFile is a PEM file of the CA certificates that verify an https:// server,
	// instead of the system's.
	CAFile string
	// TLSConfig, if set, is used for https:// servers instead of CAFile (client
	// certificates, pinned versions...).
	TLSConfig *tls.Config
	// Timeout bounds each request as a whole: connecting, sending and reading the
	// answer. An acquire that waits in the queue, and a watch, add their wait to it.
	// Default DefaultTimeout.
	Timeout time.Duration
	// Owner is the default owner of Acquire, Lock and RunWhenLeader; default
	// "<host name>:<pid>".
	Owner string
}

// server is one URL of the client's list.
type server struct {
	url string // the base URL, without a trailing slash
	key string // the URL normalised: scheme://host:port/path, to compare with Mutexd-Served-By
	tr  *http.Transport
	hc  *http.Client
}

// Client is a client of a mutexd server, or of a group of servers (--ha). It may be used
// by any number of goroutines at once.
//
// Several servers: a request goes first to the server that answered last (the first of
// the list at the start), or to the active server a Mutexd-Served-By header named, when
// that URL is one of the list. In a partitioned group (--partitions), a request about one
// resource goes first to the owner of its partition, as the group's map names it (see
// PartitionOf), whether or not its URL is one of the list. On a connection error, a
// timeout or an answer that is not the API's (ErrTransport), or a 503 (ErrUnavailable),
// it is sent to the next server, each at most once per round; any other answer, an
// error included, is the answer. When a round ends in failures and some were 503 answers,
// the call pauses for their Retry-After (the smallest, at most 2 s) and goes round again
// while that leaves it within its timeout; else it returns the last attempt's error. The
// map is learned from the first answer that shows a partitioned group, and again when the
// owner seems to have moved: see docs/clients/go.md.
type Client struct {
	servers   []*server
	current   int32 // atomic: the index of the server asked first
	timeout   time.Duration
	owner     string
	token     string
	tlsConfig *tls.Config
	pmap      partitionMap
	// onAnswer, when set (by the tests), sees every answer: the server's URL it was sent
	// to, and the answer.
	onAnswer func(to string, r *response)
}

// New returns a client of the servers named by urls: one base URL (http://host:port or
// https://host:port, with an optional path prefix for a server behind a reverse proxy),
// or several servers of a group, comma-separated. An empty urls means MUTEXD_URL, else
// DefaultURL. opts may be nil. Only http and https are spoken, and no proxy of the
// environment (HTTP_PROXY...) is used.
func New(urls string, opts *Options) (*Client, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if strings.TrimSpace(urls) == "" {
		urls = os.Getenv("MUTEXD_URL")
		if strings.TrimSpace(urls) == "" {
			urls = DefaultURL
		}
	}
	if o.Timeout < 0 {
		return nil, errors.New("mutexd: the timeout must not be negative")
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	tlsConfig := o.TLSConfig
	if tlsConfig == nil && o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("mutexd: the CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("mutexd: no PEM certificate in %s", o.CAFile)
		}
		tlsConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	c := &Client{timeout: o.Timeout, owner: o.Owner, token: o.Token, tlsConfig: tlsConfig}
	if c.owner == "" {
		c.owner = DefaultOwner()
	}
	for _, part := range strings.Split(urls, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		s, err := newServer(part, tlsConfig)
		if err != nil {
			return nil, err
		}
		c.servers = append(c.servers, s)
	}
	if len(c.servers) == 0 {
		return nil, errors.New("mutexd: no server URL given")
	}
	return c, nil
}

// NewFromEnv returns a client configured by the environment: MUTEXD_URL (one URL or
// several comma-separated; default DefaultURL), MUTEXD_TOKEN (a bearer token) and
// MUTEXD_CA_FILE (a PEM file of CAs for https). Fields set in opts win over the
// environment.
func NewFromEnv(opts *Options) (*Client, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Token == "" {
		o.Token = os.Getenv("MUTEXD_TOKEN")
	}
	if o.CAFile == "" && o.TLSConfig == nil {
		o.CAFile = os.Getenv("MUTEXD_CA_FILE")
	}
	return New(os.Getenv("MUTEXD_URL"), &o)
}

// DefaultOwner is "<host name>:<pid>", the owner sent when none is given.
func DefaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

func newServer(raw string, tlsConfig *tls.Config) (*server, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("mutexd: not a URL: %q", raw)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("mutexd: the URL must start with http:// or https://: %q", raw)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("mutexd: the URL has no host: %q", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil || u.Opaque != "" {
		return nil, fmt.Errorf("mutexd: the URL takes no query, fragment or credentials: %q", raw)
	}
	tr := &http.Transport{
		Proxy: nil, // never a proxy of the environment
		DialContext: (&net.Dialer{
			KeepAlive: 30 * time.Second,
		}).DialContext,
		TLSClientConfig:     tlsConfig,
		ForceAttemptHTTP2:   false,
		MaxIdleConns:        8,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     idleConnTimeout,
	}
	path := strings.TrimRight(u.EscapedPath(), "/")
	return &server{
		url: u.Scheme + "://" + u.Host + path,
		key: normalise(u),
		tr:  tr,
		hc: &http.Client{
			Transport: tr,
			// The API never redirects; a redirect is not its answer.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}, nil
}

// normalise is scheme://host:port/path in lower case (but the path), with the default
// port written out and no trailing slash: two spellings of one server compare equal.
func normalise(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	if port == "" {
		port = "80"
		if scheme == "https" {
			port = "443"
		}
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port) +
		strings.TrimRight(u.EscapedPath(), "/")
}

// URL is the base URL of the server asked first: the one that answered last, or the
// active server its answer named.
func (c *Client) URL() string {
	return c.servers[atomic.LoadInt32(&c.current)].url
}

// URLs is every server's base URL, in the order given.
func (c *Client) URLs() []string {
	out := make([]string, len(c.servers))
	for i, s := range c.servers {
		out[i] = s.url
	}
	return out
}

// Timeout is the request timeout (beyond any wait).
func (c *Client) Timeout() time.Duration { return c.timeout }

// Owner is the default owner.
func (c *Client) Owner() string { return c.owner }

// Close closes the idle kept-alive connections. The client stays usable.
func (c *Client) Close() {
	for _, s := range c.servers {
		s.tr.CloseIdleConnections()
	}
	c.closeOthers()
}

// ---- sending ---------------------------------------------------------------------------

type response struct {
	status int
	header http.Header
	body   []byte
	url    string
	method string
}

// served notes the server that answered (index i; -1 for a partition's owner the client
// was not given): it is asked first next time, unless its answer names the active server
// of its group by a URL of the list (Mutexd-Served-By), which is then asked first. Only a
// URL the client was given is asked first.
func (c *Client) served(i int, header http.Header) {
	if by := header.Get("Mutexd-Served-By"); by != "" {
		if u, err := url.Parse(strings.TrimSpace(by)); err == nil && u.Host != "" {
			key := normalise(u)
			for j, s := range c.servers {
				if s.key == key {
					i = j
					break
				}
			}
		}
	}
	if i >= 0 {
		atomic.StoreInt32(&c.current, int32(i))
	}
}

// send sends a request to the servers in turn (see Client); resource, when not "", is the
// one resource the request is about, sent first to its partition's owner. timeout bounds
// each attempt; deadline, when not zero, bounds the whole call: no attempt starts or lasts
// past it. The answer is a 2xx; an error answer is an *APIError.
func (c *Client) send(ctx context.Context, resource, method, path string, body []byte, timeout time.Duration, deadline time.Time) (*response, error) {
	targets := c.targets(resource)
	k := 0 // the next of targets to try in this round
	end := time.Now().Add(timeout)
	if !deadline.IsZero() && deadline.Before(end) {
		end = deadline
	}
	var last error
	pause := time.Duration(-1) // the round's smallest Retry-After, if it had a 503
	for {
		if k == len(targets) { // back at a server tried in this call
			if len(targets) == 1 || pause < 0 {
				return nil, last
			}
			wait := pause
			if wait > retryAfterCap {
				wait = retryAfterCap
			}
			if wait < retryAfterMin {
				wait = retryAfterMin
			}
			if !time.Now().Add(wait).Before(end) {
				return nil, last
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, fmt.Errorf("mutexd: %s %s: %w", method, path, ctx.Err())
			case <-t.C:
			}
			pause = -1
			// The map may have been learned again meanwhile: the owner may be another.
			targets, k = c.targets(resource), 0
		}
		s, i := targets[k].s, targets[k].i
		k++
		limit := timeout
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				if last != nil {
					return nil, last
				}
				return nil, &TransportError{Method: method, URL: s.url + path, timeout: true,
					Err: errors.New("the deadline passed before the request was sent")}
			}
			if left < limit {
				limit = left
			}
		}
		resp, err := s.do(ctx, method, path, body, limit, c.token)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("mutexd: %s %s: %w", method, s.url+path, ctx.Err())
			}
			last = err
			if resource != "" {
				c.failed(nil)
			}
			continue
		}
		if c.onAnswer != nil {
			c.onAnswer(s.url, resp)
		}
		if resp.status >= 200 && resp.status < 300 {
			if !isJSONObject(resp.body) {
				last = &TransportError{Method: method, URL: resp.url, Status: resp.status, protocol: true,
					Err: fmt.Errorf("answer %d is not a JSON object", resp.status)}
				s.tr.CloseIdleConnections()
				if resource != "" {
					c.failed(nil)
				}
				continue
			}
			c.served(i, resp.header)
			if resource != "" {
				c.answered(s, resp.header)
			}
			return resp, nil
		}
		apiErr := newAPIError(resp.status, resp.header, resp.body)
		if resp.status == http.StatusServiceUnavailable {
			last = apiErr
			if pause < 0 || apiErr.RetryAfter < pause {
				pause = apiErr.RetryAfter
			}
			if resource != "" {
				c.failed(resp.header)
			}
			continue
		}
		c.served(i, resp.header) // it answered: ask it (or its active) first next time
		if resource != "" {
			c.answered(s, resp.header)
		}
		return nil, apiErr
	}
}

func isJSONObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{' && json.Valid(b)
}

// isStale says whether err is what a kept-alive connection closed by the server (its idle
// timeout) gives: the request did not reach it, and can be sent again on a new one.
func isStale(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		strings.Contains(err.Error(), "server closed idle connection")
}

// do sends one request to this server and reads the whole answer, within limit.
func (s *server) do(ctx context.Context, method, path string, body []byte, limit time.Duration, token string) (*response, error) {
	actx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	target := s.url + path
	for try := 0; ; try++ {
		var reused bool
		trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused }}
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(actx, trace), method, target, rd)
		if err != nil {
			return nil, &TransportError{Method: method, URL: target, Err: err}
		}
		req.Header.Set("Accept", "application/json")
		req.Header.Set("User-Agent", "mutexd-go/"+Version)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := s.hc.Do(req)
		if err == nil {
			var data []byte
			data, err = io.ReadAll(io.LimitReader(res.Body, maxAnswerBytes+1))
			res.Body.Close()
			if err == nil {
				if len(data) > maxAnswerBytes {
					s.tr.CloseIdleConnections()
					return nil, &TransportError{Method: method, URL: target, Status: res.StatusCode, protocol: true,
						Err: fmt.Errorf("the answer is over %d bytes", maxAnswerBytes)}
				}
				return &response{status: res.StatusCode, header: res.Header, body: data, url: target, method: method}, nil
			}
		} else if try == 0 && reused && actx.Err() == nil && isStale(err) {
			continue // the server had closed the idle connection: send again, on a new one
		}
		// After a failure the idle connections may lead nowhere (a server that restarted,
		// or moved): the next request connects afresh, with a new lookup of the name.
		s.tr.CloseIdleConnections()
		if ctx.Err() == nil && actx.Err() != nil {
			return nil, &TransportError{Method: method, URL: target, timeout: true,
				Err: fmt.Errorf("no answer within %v", limit)}
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, &TransportError{Method: method, URL: target, Err: err}
	}
}

// ---- paths -------------------------------------------------------------------------------

// escape percent-encodes everything but the characters the API allows in a name, so that
// a name that is not one is answered invalid_resource rather than read as another path or
// a query; and a hash tag's '{' and '}' too, which the contract has sent as %7B and %7D.
func escape(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' ||
			strings.IndexByte("-._~/:@", ch) >= 0 {
			b.WriteByte(ch)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[ch>>4])
		b.WriteByte(hex[ch&15])
	}
	return b.String()
}

func resourcePath(resource string) (string, error) {
	if resource == "" {
		return "", errors.New("mutexd: the resource must not be empty")
	}
	return "/v1/resources/" + escape(resource), nil
}

// query builds "?k=v&..." from pairs, leaving out empty values.
func query(pairs ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] == "" {
			continue
		}
		if b.Len() == 0 {
			b.WriteByte('?')
		} else {
			b.WriteByte('&')
		}
		b.WriteString(pairs[i])
		b.WriteByte('=')
		b.WriteString(escape(pairs[i+1]))
	}
	return b.String()
}

// toMs is a duration in whole milliseconds, rounded to the nearest.
func toMs(d time.Duration) int64 {
	return int64((d + time.Millisecond/2) / time.Millisecond)
}

func protocolError(r *response, err error) error {
	return &TransportError{Method: r.method, URL: r.url, Status: r.status, protocol: true,
		Err: fmt.Errorf("the server's answer is malformed: %w", err)}
}

// NewLeaseID returns a new random lease id (a version 4 UUID), as Acquire proposes.
func NewLeaseID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("mutexd: no randomness: " + err.Error())
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
