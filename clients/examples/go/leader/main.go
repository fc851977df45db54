// Command leader is leader election with mutexd: run several copies of it; exactly one of
// them leads at a time, and when it stops (or dies) another takes over.
//
// The leader prints a line every second; the others print that they could not acquire
// the lease and when they will try again. Each line names the process (its PID, and the
// host name, which tells containers apart: in each container the worker is PID 1), and
// the leader's lines carry its fencing token. The leader checks that its lease still
// holds (on the clock, not only as the last renewal saw it) right before each of its
// actions. SIGTERM or Ctrl-C releases the lease (so that another process takes over at
// once) and exits 0.
//
// Configuration, by environment:
//
//	MUTEXD_URL        the server, or several comma-separated (default http://127.0.0.1:8080)
//	MUTEXD_RESOURCE   the resource to lead (default leader-election/demo)
//	MUTEXD_TTL_MS     the lease's TTL in ms (default 15000); renewed every third of it
//	MUTEXD_RETRY_S    seconds between two tries of a follower (default 5)
//	MUTEXD_TOKEN      a bearer token, if the server asks for one
//	MUTEXD_CA_FILE    a CA file to verify an https:// server with
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	mutexd "github.com/mutexd/mutexd/clients/go"
)

const beat = time.Second

var host, _ = os.Hostname()

func say(text, detail string) {
	fmt.Printf("[%s] This process (%d) %s Host %s%s.\n", time.Now().Format("15:04:05"), os.Getpid(), text, host, detail)
}

// lead is the leader's job: it runs until ctx ends (the lease is lost, or shutting down).
func lead(ctx context.Context, token uint64) error {
	// ctx.Err() compares the clock with the lease's deadline: a leader paused past it
	// (SIGSTOP, a frozen VM) stops here instead of acting once more.
	for ctx.Err() == nil {
		// Here a real leader would do its work, passing token to the storage it writes to.
		say("is currently the leader.", fmt.Sprintf(", fencing token %d", token))
		select {
		case <-ctx.Done(): // at once when it must stop
		case <-time.After(beat):
		}
	}
	if err := mutexd.LeaseFromContext(ctx).Err(); err != nil {
		say(fmt.Sprintf("lost the lease (%v).", err), "")
	}
	return nil
}

func standby(err error, retry time.Duration) {
	say(fmt.Sprintf("could not acquire lease. Retrying in %g seconds.", retry.Seconds()), "")
	if !errors.Is(err, mutexd.ErrLeaseHeld) {
		fmt.Fprintf(os.Stderr, "  (%v)\n", err)
	}
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func run() int {
	url := env("MUTEXD_URL", "http://127.0.0.1:8080")
	resource := env("MUTEXD_RESOURCE", "leader-election/demo")
	ttlMs, err := strconv.Atoi(env("MUTEXD_TTL_MS", "15000"))
	if err != nil || ttlMs <= 0 {
		fmt.Fprintf(os.Stderr, "error: MUTEXD_TTL_MS is not a number of milliseconds: %q\n", os.Getenv("MUTEXD_TTL_MS"))
		return 1
	}
	retryS, err := strconv.ParseFloat(env("MUTEXD_RETRY_S", "5"), 64)
	if err != nil || retryS <= 0 {
		fmt.Fprintf(os.Stderr, "error: MUTEXD_RETRY_S is not a number of seconds: %q\n", os.Getenv("MUTEXD_RETRY_S"))
		return 1
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	client, err := mutexd.New(url, &mutexd.Options{Token: os.Getenv("MUTEXD_TOKEN"), CAFile: os.Getenv("MUTEXD_CA_FILE")})
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		return 1
	}
	defer client.Close()
	err = client.RunWhenLeader(ctx, resource, lead, &mutexd.LeaderOptions{
		TTL:           time.Duration(ttlMs) * time.Millisecond,
		RetryInterval: time.Duration(retryS * float64(time.Second)),
		OnStandby:     standby,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		return 1
	}
	return 0
}

func main() {
	os.Exit(run())
}
