package httpfx

import (
	"context"
	"fmt"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/plugintrace"
)

// ReadinessCheck is one check of /readyz. storefx's clients are checked
// automatically; applications add their own to the group:
//
//	fx.Provide(httpfx.AsReadinessCheck(func() httpfx.ReadinessCheck { ... }))
//
// A check that returns an error, panics (logged) or has not returned within
// 1s has failed. A nil Check fails start-up.
type ReadinessCheck struct {
	Name  string
	Check func(ctx context.Context) error
}

// ReadinessGroup is the value group of ReadinessCheck.
const ReadinessGroup = "redisfx.http.readiness"

// AsReadinessCheck annotates a constructor of a ReadinessCheck so that its
// result joins the checks of /readyz.
func AsReadinessCheck(constructor any) any {
	return fx.Annotate(constructor, fx.ResultTags(`group:"`+ReadinessGroup+`"`))
}

// Probe paths: their requests make no SERVER span and are logged at debug.
const (
	HealthPath  = "/healthz"
	ReadyPath   = "/readyz"
	MetricsPath = "/metrics"
)

// CodeNotReady is the code of the 503 problem /readyz answers when a
// readiness check fails.
const CodeNotReady = "not_ready"

// isProbe reports whether r polls a probe path.
func isProbe(r *http.Request) bool {
	switch r.URL.Path {
	case HealthPath, ReadyPath, MetricsPath:
		return true
	}
	return false
}

func healthz(w http.ResponseWriter, _ *http.Request) { writeStatus(w, "ok") }

// writeStatus answers 200 {"status":status}, never cached.
func writeStatus(w http.ResponseWriter, status string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(`{"status":"` + status + `"}` + "\n"))
}

// readyz answers 200 {"status":"ready"} when every check passes within
// readinessTimeout, else 503 as a problem (code CodeNotReady) whose
// "failed" member names the failing checks (never their errors, which may
// hold addresses). A check not done by the deadline has failed, even if it
// ignores its context. Each check has at most one run in flight, shared by
// the requests that arrive meanwhile: one that never returns holds one
// goroutine, not one per request. A run that returns after its own deadline
// has failed, also for the requests that joined it late. Its Redis commands
// make no span.
func readyz(checks []ReadinessCheck, log *zap.Logger) http.HandlerFunc {
	checkers := make([]*checker, len(checks))
	for i, c := range checks {
		checkers[i] = &checker{check: c, log: log}
	}
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readinessTimeout)
		defer cancel()
		runs := make([]*checkRun, len(checkers))
		for i, c := range checkers {
			runs[i] = c.start()
		}
		failed := []string{}
		for i, run := range runs {
			passed := false
			select {
			case <-run.done:
				passed = run.passed
			case <-ctx.Done():
				select { // done just in time counts
				case <-run.done:
					passed = run.passed
				default:
				}
			}
			if !passed {
				failed = append(failed, checkers[i].check.Name)
			}
		}
		if len(failed) > 0 {
			p := NewProblem(http.StatusServiceUnavailable, CodeNotReady, "failed readiness checks: "+strings.Join(failed, ", "))
			p.Extensions = map[string]any{"failed": failed}
			p.Write(w)
			return
		}
		writeStatus(w, "ready")
	}
}

// checker runs one ReadinessCheck, at most once at a time.
type checker struct {
	check ReadinessCheck
	log   *zap.Logger
	mu    sync.Mutex
	run   *checkRun // in flight, nil when none
}

// checkRun is one run of a check: passed is set before done is closed.
type checkRun struct {
	done   chan struct{}
	passed bool
}

// start returns the run in flight, or starts one, on a context of its own:
// a request that ends does not fail the run others share.
func (c *checker) start() *checkRun {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run != nil {
		return c.run
	}
	run := &checkRun{done: make(chan struct{})}
	c.run = run
	go func() {
		defer func() { // also after a runtime.Goexit in the check
			c.mu.Lock()
			c.run = nil
			c.mu.Unlock()
			close(run.done)
		}()
		ctx, cancel := context.WithTimeout(plugintrace.WithoutCommandSpans(context.Background()), readinessTimeout)
		defer cancel()
		deadline, _ := ctx.Deadline()
		// A pass after the run's own deadline is late, also for a request
		// that joined the run just before it ended.
		run.passed = runCheck(ctx, c.check, c.log) && time.Now().Before(deadline)
	}()
	return run
}

// runCheck reports whether c passed; a panic fails it and is logged.
func runCheck(ctx context.Context, c ReadinessCheck, log *zap.Logger) (passed bool) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("readiness check panicked", zap.String("check", c.Name),
				zap.String("panic", fmt.Sprint(p)), zap.ByteString("stack", debug.Stack()))
			passed = false
		}
	}()
	return c.Check(ctx) == nil
}

// checkReadiness refuses a check without a Check func at start-up.
func checkReadiness(checks []ReadinessCheck) error {
	for _, c := range checks {
		if c.Check == nil {
			return fmt.Errorf("httpfx: readiness check %q has no Check func", c.Name)
		}
	}
	return nil
}

// readinessTimeout bounds /readyz: a check not done by then has failed.
const readinessTimeout = time.Second
