package redistest

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
)

// examplesAddr is the address ForExamples put in REDIS_ADDR; Start does not
// take it for a shared server the user chose, so tests keep their own
// private servers (and their fault helpers).
var examplesAddr string

// TestingM is what goleak.VerifyTestMain runs: a *testing.M, or ForExamples's
// wrapper of one.
type TestingM interface{ Run() int }

// ForExamples wraps m so that, when REDIS_ADDR is unset, a private
// redis-server runs while the package's tests and examples run, and
// REDIS_ADDR names it. Example functions read REDIS_ADDR as a user's program
// would, falling back to 127.0.0.1:6379; without this they would depend on
// a server being there, which no test may. Use it in TestMain:
//
//	goleak.VerifyTestMain(redistest.ForExamples(m))
func ForExamples(m TestingM) TestingM { return examplesMain{m} }

type examplesMain struct{ m TestingM }

// Run runs the package with REDIS_ADDR set, as ForExamples says.
func (e examplesMain) Run() int {
	if os.Getenv("REDIS_ADDR") != "" {
		return e.m.Run()
	}
	s, err := startDetached()
	if err != nil {
		fmt.Fprintf(os.Stderr, "redistest: cannot start a redis-server for the examples: %v\n", err)
		return 1
	}
	defer s.stopDetached()
	examplesAddr = s.addr
	defer func() { examplesAddr = "" }()
	if err := os.Setenv("REDIS_ADDR", s.addr); err != nil {
		fmt.Fprintf(os.Stderr, "redistest: %v\n", err)
		return 1
	}
	defer os.Unsetenv("REDIS_ADDR")
	return e.m.Run()
}

// startDetached starts a private server that belongs to no test: the caller
// stops it with stopDetached.
func startDetached() (*Server, error) {
	dir, err := os.MkdirTemp("", "redistest-examples-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, private: true}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if s.port, lastErr = pickPort(); lastErr != nil {
			continue
		}
		s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
		if lastErr = s.spawn(); lastErr == nil {
			return s, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, lastErr
}

func (s *Server) stopDetached() {
	s.stop()
	_ = os.RemoveAll(s.dir)
}

var _ TestingM = (*testing.M)(nil)
