// Package storefx connects an Fx application to Redis: it provides the
// redis.UniversalClient every other redisfx module uses, checks it at start,
// and closes it at stop.
//
// # Getting started
//
//	fx.New(
//		storefx.Module,
//		fx.Provide(storefx.FromEnvConfig), // REDIS_URL, else localhost:6379
//		fx.Invoke(func(rdb redis.UniversalClient) { … }),
//	)
//
// Without a Config in the graph the client connects to localhost:6379. A
// Config may be supplied by value or by pointer (fx.Supply(cfg) or
// fx.Supply(&cfg)); supplying both is a start-up error.
//
// # Standalone, Sentinel and Cluster
//
// One Config describes every topology: a redis://, rediss:// or unix:// URL;
// one address; several seed addresses (or Cluster: true) for Redis Cluster;
// MasterName with Sentinel addresses. The client is always a
// redis.UniversalClient, so code written against it runs on all three.
// Cluster clients reload their slot map every 2 s
// (Config.ClusterStateReloadInterval), so a failover is followed in seconds.
//
// # Start-up and errors
//
// On start the client is pinged with backoff for at most
// Config.ConnectTimeout (default 5 s). If Redis does not answer, start-up
// fails with an error that names the client, its address and the cause
// ("connection refused", or a server that accepts connections but does not
// answer). If Redis answers with a refusal that retrying cannot change (a
// wrong or missing password, a database it does not have, an ACL user
// without SELECT), start-up fails at once, saying Redis answered and
// refused, with a *redisfx.ConfigError naming the field to fix wrapped
// around Redis's reply; a server that answers LOADING, BUSY or the like is
// retried, and reported as not ready. An invalid Config fails before
// anything is dialled, with a *redisfx.ConfigError naming the field; no
// error repeats a password or a user name.
//
// Every client storefx builds sets go-redis's ContextTimeoutEnabled, so a
// context deadline bounds a command even when Redis is paused.
//
// # Several clients
//
// NamedClient adds more clients (consumed with `name:"…"`). All of them are
// in the *Registry, which /readyz and the store_up{client} gauge read.
//
// # Health check
//
// Once started, every client is checked in the background: a PING every
// Config.HealthCheckInterval (1s), bounded by Config.HealthCheckTimeout
// (500ms). /readyz (Registry.Ready) and store_up report the last result, so
// they answer at once whatever Redis does: down, frozen or paused.
//
// # Circuit breaker
//
// Every client has a circuit breaker (Config.Breaker; one per node of a
// Cluster client). After 5 consecutive failed commands of the caller's (not
// go-redis's connection handshakes; on a Cluster, each try sent to the
// node) it opens: commands
// then fail at once with ErrCircuitOpen, without being sent, instead of
// waiting for a dead or frozen Redis; a background PING, sent as it opens and
// then every 250ms, or a successful health check closes it. Every module on
// the client applies its own policy to the fast error (idempotencyfx's
// ErrorPolicy, ratelimitfx's fail-open). Client.Breaker reports its state;
// store_breaker_state{client} and store_breaker_opened_total{client} export
// it. BypassBreaker marks the few commands that must be sent anyway.
//
// # Instrumentation
//
// Modules contribute go-redis hooks to every client through the value group
// InstrumentationGroup (see AsInstrumentation): tracingfx adds command spans
// and command metrics this way.
//
// # go-redis's own log
//
// go-redis prints some failures (a failed dial) through a process-wide
// logger on stderr. Add RouteRedisLogs to send them to the app's
// *zap.Logger instead; it is an option because it changes that logger for
// the whole process.
package storefx
