// Package testserver starts and stops real mutexd servers (and Azurite) for the tests of
// the Go client.
//
// The binary is MUTEXD_BIN (a path relative to the repository's root, or absolute), else
// build/mutexd at the root. A missing binary fails the test with a message saying so: the
// tests never skip for want of a server. Each server listens on a free loopback port
// chosen at run time, keeps its data in a fresh temporary directory, and is stopped at the
// end of the test (SIGTERM, exit status 0 checked unless the test killed it).
package testserver

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BaseArgs are given to every server: short TTLs make the renewal tests fast, and two
// threads keep a loaded machine usable.
var BaseArgs = []string{"--min-ttl-ms", "500", "--threads", "2"}

// Root is the repository's root.
func Root() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("testserver: no caller information")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", "..", ".."))
}

// Bin is the mutexd binary the tests run.
func Bin() string {
	bin := os.Getenv("MUTEXD_BIN")
	if bin == "" {
		bin = filepath.Join("build", "mutexd")
	}
	if !filepath.IsAbs(bin) {
		bin = filepath.Join(Root(), bin)
	}
	return bin
}

// FreePort is a TCP port of 127.0.0.1 that nothing listened on a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("no free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

var started = regexp.MustCompile(`msg="started".* address=(\S+)`)

// Server is one mutexd process; Start, Kill and Start again run it anew on the same port
// and data directory (a restart).
type Server struct {
	t testing.TB
	// Args and Env are given to the server after BaseArgs and the environment; "{url}" in
	// them is replaced by the server's URL.
	Args    []string
	Env     []string
	DataDir string
	Port    int
	URL     string
	fixed   bool // the port was given: it cannot be changed when it is taken

	mu     sync.Mutex
	lines  []string
	cmd    *exec.Cmd
	exited chan struct{}
	state  *os.ProcessState
	killed bool
}

// New prepares a server on a free port (or on port, if not 0); Start starts it.
func New(t testing.TB, port int, args []string, env ...string) *Server {
	t.Helper()
	s := &Server{t: t, Args: args, Env: env, DataDir: t.TempDir(), Port: port, fixed: port != 0}
	if s.Port == 0 {
		s.Port = FreePort(t)
	}
	s.URL = "http://127.0.0.1:" + strconv.Itoa(s.Port)
	t.Cleanup(s.cleanup)
	return s
}

// Start starts a new server (on a free port) and waits until it serves.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	return New(t, 0, args).Start()
}

// Start starts the server's process and waits until it serves; it fails the test if it
// does not within 15 s. When the port turns out to be taken at the first start, another is
// tried.
func (s *Server) Start() *Server {
	s.t.Helper()
	bin := Bin()
	if _, err := os.Stat(bin); err != nil {
		s.t.Fatalf("no mutexd binary at %s (run `make build`, or set MUTEXD_BIN to the server binary): %v", bin, err)
	}
	for attempt := 0; ; attempt++ {
		err := s.start(bin)
		if err == nil {
			return s
		}
		if s.fixed || attempt >= 4 || !strings.Contains(s.Log(), "in use") {
			s.t.Fatalf("mutexd did not start: %v\n%s", err, s.Log())
		}
		s.Port = FreePort(s.t)
		s.URL = "http://127.0.0.1:" + strconv.Itoa(s.Port)
	}
}

func (s *Server) expand(v string) string { return strings.ReplaceAll(v, "{url}", s.URL) }

func (s *Server) start(bin string) error {
	args := []string{"--listen", "127.0.0.1:" + strconv.Itoa(s.Port), "--data-dir", s.DataDir}
	args = append(args, BaseArgs...)
	for _, a := range s.Args {
		args = append(args, s.expand(a))
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = os.Environ()
	for _, e := range s.Env {
		cmd.Env = append(cmd.Env, s.expand(e))
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	ready := make(chan struct{})
	exited := make(chan struct{})
	s.mu.Lock()
	s.cmd, s.exited, s.state, s.killed = cmd, exited, nil, false
	s.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		once := false
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.lines = append(s.lines, line)
			s.mu.Unlock()
			if !once && started.MatchString(line) {
				once = true
				close(ready)
			}
		}
		_ = cmd.Wait()
		s.mu.Lock()
		s.state = cmd.ProcessState
		s.mu.Unlock()
		close(exited)
	}()
	select {
	case <-ready:
		return nil
	case <-exited:
		return fmt.Errorf("it exited: %v", cmd.ProcessState)
	case <-time.After(15 * time.Second):
		s.Kill()
		return fmt.Errorf("it did not say it started within 15 s")
	}
}

// Running reports whether the process runs.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Pid is the process's id.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd.Process.Pid
}

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(sig)
	}
}

// Kill sends SIGKILL, as a crash, and waits for the process to end.
func (s *Server) Kill() {
	if !s.Running() {
		return
	}
	s.mu.Lock()
	s.killed = true
	exited := s.exited
	s.mu.Unlock()
	s.signal(syscall.SIGKILL)
	<-exited
}

// Pause freezes the process (SIGSTOP); Resume thaws it.
func (s *Server) Pause()  { s.signal(syscall.SIGSTOP) }
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

// Stop sends SIGTERM and waits for the process to end, failing the test unless it
// exits 0 within 20 s.
func (s *Server) Stop() {
	s.t.Helper()
	if !s.Running() {
		return
	}
	s.Resume() // a stopped process cannot stop
	s.signal(syscall.SIGTERM)
	s.mu.Lock()
	exited := s.exited
	s.mu.Unlock()
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		s.Kill()
		s.t.Errorf("mutexd did not stop within 20 s:\n%s", s.Log())
		return
	}
	s.mu.Lock()
	state := s.state
	s.mu.Unlock()
	if state == nil || state.ExitCode() != 0 {
		s.t.Errorf("mutexd exited %v:\n%s", state, s.Log())
	}
}

func (s *Server) cleanup() {
	s.Stop()
}

// Log is the last lines the server wrote.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	lines := s.lines
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	return strings.Join(lines, "\n")
}

// Lines is every line the server wrote so far.
func (s *Server) Lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.lines...)
}

// Azurite is an Azurite (the Azure Storage emulator) started by scripts/azurite.sh.
type Azurite struct {
	Dir              string
	Port             int
	ConnectionString string
}

// StartAzurite installs (scripts/azurite.sh install: npm ci in tests/azurite, once) and
// starts an Azurite on a free port, stopped at the end of the test.
func StartAzurite(t testing.TB) *Azurite {
	t.Helper()
	script := filepath.Join(Root(), "scripts", "azurite.sh")
	dir := t.TempDir()
	for _, args := range [][]string{{"install"}, {"start", dir}} {
		cmd := exec.Command(script, args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("scripts/azurite.sh %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() { _ = exec.Command(script, "stop", dir).Run() })
	port, err := os.ReadFile(filepath.Join(dir, "port"))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := os.ReadFile(filepath.Join(dir, "connection-string"))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(strings.TrimSpace(string(port)))
	return &Azurite{Dir: dir, Port: p, ConnectionString: strings.TrimSpace(string(cs))}
}
