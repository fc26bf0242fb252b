// Package storefx connects an Fx application to Redis: it provides the
// redis.UniversalClient every other redisfx module uses, checks it at start,
// and closes it at stop.
//
//	fx.New(
//		storefx.Module,
//		fx.Provide(storefx.FromEnvConfig), // REDIS_URL, else localhost:6379
//		fx.Invoke(func(rdb redis.UniversalClient) { … }),
//	)
//
// # Standalone, Sentinel and Cluster
//
// One Config describes every topology: a URL, parsed by go-redis (every
// option go-redis reads from a URL applies); one address; several seed
// addresses (or Cluster: true) for Redis Cluster; MasterName with Sentinel
// addresses. The client is always a redis.UniversalClient. Cluster clients
// reload their slot map every 2s (Config.ClusterStateReloadInterval), so a
// failover is followed in seconds.
//
// # Start-up and errors
//
// An invalid Config fails fx.New with a *redisfx.ConfigError naming the
// field. On start the client is pinged with backoff for at most
// Config.ConnectTimeout (default 5s). If Redis does not answer, start-up
// fails naming the client, its address and the cause ("connection
// refused", a dial error, or a server that accepts connections but does
// not answer). If Redis answers with a refusal that retrying cannot change,
// start-up fails at once; a wrong or missing password, a database the
// server lacks, a Cluster or non-Cluster server, an unknown Sentinel
// master wrap a *redisfx.ConfigError naming the field to fix around
// Redis's reply. LOADING, BUSY and the like are retried and reported as
// "not ready". No error repeats a password.
//
// Every client sets go-redis's ContextTimeoutEnabled, so a context deadline
// bounds a command even when Redis is paused.
//
// # Several clients, health check, circuit breaker
//
// NamedClient adds more clients (consumed with `name:"…"`), all in the
// *Registry. Once started, every client is PINGed in the background every
// Config.HealthCheckInterval; /readyz (Registry.Ready) and store_up report
// the last result without waiting for Redis.
//
// Every client has a circuit breaker (Config.Breaker; one per Cluster
// node): after 5 consecutive failed commands, commands fail at once with
// ErrCircuitOpen until a background PING answers. Client.Breaker reports
// its state; BypassBreaker marks commands that must be sent anyway.
//
// # Instrumentation and logs
//
// Modules contribute go-redis hooks to every client through the value group
// InstrumentationGroup (see AsInstrumentation). RouteRedisLogs sends
// go-redis's process-wide log to the app's *zap.Logger.
package storefx
