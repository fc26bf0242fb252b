package httpfx

import (
	"context"
	"fmt"
	"net/http"
	"runtime/debug"
	"strings"
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
// A check that returns an error, panics or has not returned within 1s has
// failed; a panic is logged at error level. Check must not be nil: Module
// fails start-up naming the check.
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

// Probe paths: the health, readiness and metrics endpoints that machines
// poll. Their requests make no SERVER span (a probe every few seconds is
// not a trace anyone reads) and their access log lines are at debug level.
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

func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
}

// readyz answers 200 {"status":"ready"} when every check passes within
// readinessTimeout, else 503 as a problem (code CodeNotReady) whose
// "failed" member names the failing checks (without error details, which
// may hold addresses). The checks run side by side, and one that has not
// returned at the deadline has failed, even if it ignores its context:
// the answer never waits longer than the deadline. A 503 is an error answer
// like any other of redisfx, so it is problem+json too. The checks' Redis
// commands make no span. A check that panics has failed: the panic is
// logged, never allowed to end the process (it runs in its own goroutine,
// where no recover of net/http's or the router's would catch it).
func readyz(checks []ReadinessCheck, log *zap.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(plugintrace.WithoutCommandSpans(r.Context()), readinessTimeout)
		defer cancel()
		passed := make([]chan bool, len(checks))
		for i, c := range checks {
			passed[i] = make(chan bool, 1) // a late check's answer is dropped
			go func() { passed[i] <- runCheck(ctx, c, log) }()
		}
		failed := []string{}
		for i, c := range checks {
			ok := false
			select {
			case ok = <-passed[i]:
			case <-ctx.Done():
				select { // done just in time counts
				case ok = <-passed[i]:
				default:
				}
			}
			if !ok {
				failed = append(failed, c.Name)
			}
		}
		if len(failed) > 0 {
			p := NewProblem(http.StatusServiceUnavailable, CodeNotReady, "failed readiness checks: "+strings.Join(failed, ", "))
			p.Extensions = map[string]any{"failed": failed}
			p.Write(w)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte(`{"status":"ready"}` + "\n"))
	}
}

// runCheck runs c and reports whether it passed; a panic is a failure,
// logged with the check's name, the panic value and the stack.
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

// checkReadiness refuses a check without a Check func at start-up, where
// the app's author sees it, instead of failing every /readyz.
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
