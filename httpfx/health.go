package httpfx

import (
	"context"
	"fmt"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"go.uber.org/fx"
	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"

	"github.com/redisfx/redisfx/plugintrace"
)

// ReadinessCheck is one check of /readyz. storefx's clients are checked
// automatically; applications add their own to the group:
//
//	fx.Provide(httpfx.AsReadinessCheck(func() httpfx.ReadinessCheck { ... }))
//
// A check that returns an error, panics (logged; a nil Check too) or has
// not returned within 1s has failed.
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

func healthz(w http.ResponseWriter, _ *http.Request) { writeStatus(w, "ok") }

// writeStatus answers 200 {"status":status}, never cached.
func writeStatus(w http.ResponseWriter, status string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(`{"status":"` + status + `"}` + "\n"))
}

// readyz answers 503 naming the failing checks, never their errors (which
// may hold addresses). Each check has at most one run in flight, shared by
// the requests that arrive meanwhile: one that never returns holds one
// goroutine, not one per request.
func readyz(checks []ReadinessCheck, log *zap.Logger) http.HandlerFunc {
	var inFlight singleflight.Group
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readinessTimeout)
		defer cancel()
		runs := make([]<-chan singleflight.Result, len(checks))
		for i, c := range checks {
			runs[i] = inFlight.DoChan(strconv.Itoa(i), func() (any, error) { return runCheck(c, log), nil })
		}
		failed := []string{}
		for i, run := range runs {
			var res singleflight.Result
			select {
			case res = <-run:
			case <-ctx.Done():
				select { // done just in time counts
				case res = <-run:
				default:
				}
			}
			if passed, _ := res.Val.(bool); !passed {
				failed = append(failed, checks[i].Name)
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

// runCheck runs c on a context of its own (a request that ends does not
// fail the run others share) and reports whether it passed within
// readinessTimeout, also for a request that joined the run late; a panic
// fails it and is logged. Its Redis commands make no span.
func runCheck(c ReadinessCheck, log *zap.Logger) (passed bool) {
	ctx, cancel := context.WithTimeout(plugintrace.WithoutCommandSpans(context.Background()), readinessTimeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	defer func() {
		if p := recover(); p != nil {
			log.Error("readiness check panicked", zap.String("check", c.Name),
				zap.String("panic", fmt.Sprint(p)), zap.ByteString("stack", debug.Stack()))
			passed = false
		}
	}()
	return c.Check(ctx) == nil && time.Now().Before(deadline)
}

// readinessTimeout bounds /readyz: a check not done by then has failed.
const readinessTimeout = time.Second
