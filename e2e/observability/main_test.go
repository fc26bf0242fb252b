// Package observability runs the payments example as an operator would:
// exporting spans to a trace backend the test queries, scraped by a real
// Prometheus with the generated rules, routed by a real Alertmanager to
// local webhooks. It drives the faults the alerts name and checks that
// each alert fires, notifies the right receiver and resolves, within its
// documented time. Run it with make e2e-observability (it is skipped
// otherwise: it takes minutes).
package observability

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// enabled is the variable that turns the run on (make e2e-observability sets it).
const enabled = "REDISFX_E2E_OBSERVABILITY"

// Paths of the binaries TestMain builds: the payments example and the rule generator.
var paymentsBin, alertsBin string

func TestMain(m *testing.M) {
	if os.Getenv(enabled) == "" {
		fmt.Println("e2e/observability: skipped; run make e2e-observability (or set " + enabled + "=1) to run it")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "redisfx-e2e-observability")
	if err != nil {
		panic(err)
	}
	paymentsBin, alertsBin = filepath.Join(dir, "payments"), filepath.Join(dir, "redisfx-alerts")
	for bin, pkg := range map[string]string{paymentsBin: "../../examples/payments", alertsBin: "../../cmd/redisfx-alerts"} {
		if out, err := exec.Command("go", "build", "-race", "-o", bin, pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", pkg, err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	if err := goleak.Find(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		code = 1
	}
	os.Exit(code)
}
