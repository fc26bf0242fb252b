// Command redisfx-alerts prints the Prometheus alerting rules of the
// tracing spec for a metric prefix, or their promtool tests, or the
// Alertmanager routing:
//
//	go run ./cmd/redisfx-alerts -prefix myapp > rules.yml
//	go run ./cmd/redisfx-alerts -prefix myapp -tests > rules_test.yml
//	go run ./cmd/redisfx-alerts -alertmanager > alertmanager.yml
package main

import (
	"flag"
	"fmt"
	"os"
	"regexp"

	"github.com/redisfx/redisfx/metricsfx"
)

func main() {
	prefix := flag.String("prefix", metricsfx.DefaultPrefix, "metric prefix of the application (metricsfx.Config.Prefix)")
	tests := flag.Bool("tests", false, "print promtool unit tests for the rules instead")
	rules := flag.String("rules-file", "rules.yml", "rule file named in the tests")
	am := flag.Bool("alertmanager", false, "print the Alertmanager routing instead")
	flag.Parse()
	if !regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`).MatchString(*prefix) {
		fmt.Fprintf(os.Stderr, "invalid -prefix %q: not a Prometheus name\n", *prefix)
		os.Exit(2)
	}
	switch {
	case *am:
		os.Stdout.Write(metricsfx.AlertmanagerConfig())
	case *tests:
		os.Stdout.Write(metricsfx.AlertRuleTests(*prefix, *rules))
	default:
		os.Stdout.Write(metricsfx.AlertRules(*prefix))
	}
}
