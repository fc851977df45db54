package mutexd_test

import (
	"os"
	"testing"
)

// helpers are programs the test binary runs as a child process of a test when its
// environment names one (MUTEXD_GO_TEST_HELPER): a leader to pause with SIGSTOP.
var helpers = map[string]func() int{}

func TestMain(m *testing.M) {
	if name := os.Getenv("MUTEXD_GO_TEST_HELPER"); name != "" {
		os.Exit(helpers[name]())
	}
	os.Exit(m.Run())
}
