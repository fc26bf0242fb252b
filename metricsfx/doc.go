// Package metricsfx provides the application's Prometheus registry and the
// prefixed Registerer that every redisfx module registers its collectors
// with, so that every redisfx metric is named <prefix>_<name>, and the
// alert rules that read those metrics.
//
// # Getting started
//
//	fx.New(
//		metricsfx.Module,
//		fx.Supply(metricsfx.Config{Prefix: "payments"}),
//		httpfx.Module, // serves the registry at /metrics
//		…
//	)
//
// Without metricsfx.Module there is no registry: the modules record no
// metrics and httpfx serves no /metrics.
//
// Every module that finds a prometheus.Registerer in the graph registers its
// metrics with it: storefx (store_up), tracingfx (commands_total,
// command_duration_seconds, errors_total, tracing_export_errors_total),
// httpfx (http_requests_total, http_request_duration_seconds), idempotencyfx
// and the plugins. The registry is the app's own, never Prometheus's global
// default, with the Go runtime and process collectors under their standard
// names (go_goroutines, process_cpu_seconds_total); an app may supply its
// own in Config.Registry.
//
// # Alerts
//
// Alerts is the table of alert rules for those metrics, with their
// thresholds, durations, severities and runbooks. AlertRules and
// AlertmanagerConfig render it for a Profile (the prefix and scrape job) as
// Prometheus rules and Alertmanager routing, and package alerttest as
// promtool unit tests; the redisfx-alerts command prints them, and
// docs/monitoring/ in the repository holds the output for the default
// prefix.
package metricsfx
