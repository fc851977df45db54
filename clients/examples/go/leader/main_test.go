package main

// Runs the worker (this test binary, run as the program) against a real server: two
// workers elect one leader, SIGTERM makes it release and exit 0, and the other takes over
// at once; the lines are those of the Python worker.

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if os.Getenv("MUTEXD_LEADER_EXAMPLE_RUN") == "1" {
		os.Exit(run())
	}
	os.Exit(m.Run())
}

// startServer starts the mutexd binary (MUTEXD_BIN, else build/mutexd at the root of the
// repository) on a free loopback port with a fresh data directory; it is stopped at the
// end of the test.
func startServer(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..", "..")
	bin := os.Getenv("MUTEXD_BIN")
	if bin == "" {
		bin = filepath.Join("build", "mutexd")
	}
	if !filepath.IsAbs(bin) {
		bin = filepath.Join(root, bin)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no mutexd binary at %s (run `make build`, or set MUTEXD_BIN to the server binary): %v", bin, err)
	}
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--min-ttl-ms", "500", "--threads", "2")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	address := make(chan string, 1)
	go func() {
		started := regexp.MustCompile(`msg="started".* address=(\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := started.FindStringSubmatch(sc.Text()); m != nil {
				address <- m[1]
			}
		}
	}()
	select {
	case a := <-address:
		return "http://" + a
	case <-time.After(15 * time.Second):
		t.Fatal("mutexd did not start")
	}
	return ""
}

var (
	leaderLine = regexp.MustCompile(`^\[\d\d:\d\d:\d\d\] This process \((\d+)\) is currently the leader\. ` +
		`Host ` + regexp.QuoteMeta(host) + `, fencing token (\d+)\.$`)
	waitingLine = regexp.MustCompile(`^\[\d\d:\d\d:\d\d\] This process \((\d+)\) could not acquire lease\. ` +
		`Retrying in [\d.]+ seconds\. Host ` + regexp.QuoteMeta(host) + `\.$`)
)

type worker struct {
	cmd     *exec.Cmd
	mu      sync.Mutex
	leads   []time.Time
	waiting int
	other   []string
	exited  chan struct{}
}

func startWorker(t *testing.T, url string) *worker {
	w := &worker{cmd: exec.Command(os.Args[0], "-test.run=^$"), exited: make(chan struct{})}
	w.cmd.Env = append(os.Environ(), "MUTEXD_LEADER_EXAMPLE_RUN=1", "MUTEXD_URL="+url,
		"MUTEXD_RESOURCE=leader-election/demo", "MUTEXD_TTL_MS=3000", "MUTEXD_RETRY_S=0.5")
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	w.cmd.Stderr = w.cmd.Stdout
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(w.cmd.Process.Pid)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			l := sc.Text()
			w.mu.Lock()
			if m := leaderLine.FindStringSubmatch(l); m != nil && m[1] == pid {
				w.leads = append(w.leads, time.Now())
			} else if m := waitingLine.FindStringSubmatch(l); m != nil && m[1] == pid {
				w.waiting++
			} else {
				w.other = append(w.other, l)
			}
			w.mu.Unlock()
		}
		_ = w.cmd.Wait()
		close(w.exited)
	}()
	t.Cleanup(func() {
		_ = w.cmd.Process.Kill()
		<-w.exited
	})
	return w
}

func (w *worker) ledSince(t time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.leads) > 0 && !w.leads[len(w.leads)-1].Before(t)
}

func TestTwoWorkersOneLeaderAndAHandOverOnSIGTERM(t *testing.T) {
	url := startServer(t)
	a, b := startWorker(t, url), startWorker(t, url)
	end := time.Now().Add(10 * time.Second)
	for !a.ledSince(time.Time{}) && !b.ledSince(time.Time{}) {
		if time.Now().After(end) {
			t.Fatalf("no leader: %q %q", a.other, b.other)
		}
		time.Sleep(50 * time.Millisecond)
	}
	leader, follower := a, b
	if b.ledSince(time.Time{}) {
		leader, follower = b, a
	}
	since := time.Now()
	time.Sleep(2 * time.Second)
	if follower.ledSince(time.Time{}) || !leader.ledSince(since) {
		t.Fatal("not exactly one leader")
	}
	follower.mu.Lock()
	waiting := follower.waiting
	follower.mu.Unlock()
	if waiting < 2 {
		t.Fatalf("the follower said it waits %d times", waiting)
	}

	// SIGTERM: the leader releases and exits 0, and the other takes over at once (not
	// after the TTL of 3 s).
	stopped := time.Now()
	_ = leader.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-leader.exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the leader did not exit on SIGTERM")
	}
	if code := leader.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("the leader exited %d: %q", code, leader.other)
	}
	for !follower.ledSince(stopped) {
		if time.Since(stopped) > 2*time.Second {
			t.Fatal("no take-over within 2 s of the SIGTERM")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, w := range []*worker{a, b} {
		w.mu.Lock()
		if len(w.other) > 0 {
			t.Errorf("lines of another form: %q", w.other)
		}
		w.mu.Unlock()
	}
}
