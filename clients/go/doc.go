// Package mutexd is the Go client of mutexd, a lease server: acquire, renew and release
// timed leases on named resources over HTTP/JSON, with fencing tokens, waiting in a FIFO
// queue, semaphores and shared leases, watches, and groups of servers (--ha).
//
// It is built on the standard library only. Besides one method per operation of the API
// (Acquire, Renew, Release, Break, Get, Watch, List, Events, WhoAmI, Servers), it has what
// every user of leases needs: Lock, a lease renewed in the background whose Done channel
// closes the moment it is lost; LockMany, leases on several resources taken at once and
// kept alive as a set (AcquireMany, RenewMany, ReleaseMany), and LockOrdered, its
// counterpart for resources of different partitions; and RunWhenLeader, the
// leader-election loop.
//
//	client, err := mutexd.NewFromEnv(nil) // MUTEXD_URL, MUTEXD_TOKEN, MUTEXD_CA_FILE
//	if err != nil {
//		log.Fatal(err)
//	}
//	lease, err := client.Lock(ctx, "jobs/nightly-report", &mutexd.LockOptions{TTL: 15 * time.Second, Wait: 30 * time.Second})
//	if err != nil {
//		log.Fatal(err) // errors.Is(err, mutexd.ErrLeaseHeld): another worker runs it
//	}
//	defer lease.Release(context.Background())
//	for _, part := range parts {
//		if err := lease.Err(); err != nil {
//			return err // lost: someone else may hold it now; stop here
//		}
//		save(part, lease.Token()) // the storage refuses tokens older than the newest it saw
//	}
//
// Errors match the sentinels of the table in docs/clients.md with errors.Is (ErrLeaseHeld,
// ErrLeaseLost, ErrTransport...); an error answer is an *APIError and a request without a
// usable answer a *TransportError (errors.As). When a call's context ends, its error wraps
// the context's (errors.Is(err, context.Canceled)).
package mutexd
