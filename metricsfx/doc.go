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
// metrics and httpfx serves no /metrics. docs/monitoring.md lists every
// module's metrics.
//
// # Alerts
//
// Alerts is the table of alert rules for those metrics. AlertRules and
// AlertmanagerConfig render it for a Profile as Prometheus rules and
// Alertmanager routing; docs/monitoring/ in the repository holds the output
// for the default prefix.
package metricsfx
