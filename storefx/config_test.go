package storefx

import (
	"crypto/tls"
	"errors"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx"
)

// builtOptions returns the options go-redis holds for the client New
// builds from cfg (a Cluster's as *redis.Options: its nodes').
func builtOptions(t *testing.T, cfg Config) *redis.Options {
	t.Helper()
	c, err := New("default", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	switch u := c.Unwrap().(type) {
	case *redis.Client:
		return u.Options()
	case *redis.ClusterClient:
		o := u.Options()
		return &redis.Options{Addr: strings.Join(o.Addrs, ","), Username: o.Username, Password: o.Password,
			TLSConfig: o.TLSConfig, PoolSize: o.PoolSize, DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout,
			WriteTimeout: o.WriteTimeout, PoolTimeout: o.PoolTimeout, Protocol: o.Protocol, DisableIdentity: o.DisableIdentity,
			ContextTimeoutEnabled: o.ContextTimeoutEnabled}
	}
	t.Fatalf("New built a %T", c.Unwrap())
	return nil
}

// Every option go-redis reads from a URL reaches the client: they were
// refused ("option ... is not read from the URL"), although users copy such
// URLs from their platform.
func TestURLOptionsReachTheClient(t *testing.T) {
	const opts = "?dial_timeout=3s&pool_size=50&protocol=2&read_timeout=7s&client_name=app&max_retries=2"
	p, err := ParseURL("redis://h:6379/0" + opts)
	if err != nil || p.DialTimeout != 3*time.Second || p.PoolSize != 50 || p.Protocol != 2 {
		t.Fatalf("ParseURL: %+v, %v", p, err)
	}
	for _, cfg := range []Config{{URL: "redis://u:pw@h:6379/3" + opts}, {URL: "redis://u:pw@h:6379" + opts, Cluster: true}} {
		o := builtOptions(t, cfg)
		if o.DialTimeout != 3*time.Second || o.PoolSize != 50 || o.Protocol != 2 || o.ReadTimeout != 7*time.Second ||
			o.Username != "u" || o.Password != "pw" || o.PoolTimeout != 8*time.Second || !o.DisableIdentity || !o.ContextTimeoutEnabled {
			t.Errorf("%s: the client's options %+v", cfg.URL, o)
		}
	}
	if o := builtOptions(t, Config{URL: "redis://u:pw@h:6379/3" + opts}); o.DB != 3 || o.ClientName != "app" || o.MaxRetries != 2 {
		t.Errorf("DB %d, ClientName %q, MaxRetries %d", o.DB, o.ClientName, o.MaxRetries)
	}
	// What the URL leaves unset comes from Config; what it sets wins.
	o := builtOptions(t, Config{URL: "redis://h:1?pool_size=7", PoolSize: 3, MinIdleConns: 2, Password: "cfg", DialTimeout: time.Second})
	if o.PoolSize != 7 || o.MinIdleConns != 2 || o.Password != "cfg" || o.DialTimeout != time.Second {
		t.Errorf("URL over Config: %+v", o)
	}
	// Config.TLS (a CA, say) is used for rediss://; without it the URL's.
	own := &tls.Config{ServerName: "own", MinVersion: tls.VersionTLS12}
	if o := builtOptions(t, Config{URL: "rediss://h:1", TLS: own}); o.TLSConfig != own {
		t.Errorf("rediss:// with Config.TLS: %+v", o.TLSConfig)
	}
	if o := builtOptions(t, Config{URL: "rediss://h:1?skip_verify=true"}); o.TLSConfig == nil || !o.TLSConfig.InsecureSkipVerify {
		t.Errorf("rediss:// with skip_verify: %+v", o.TLSConfig)
	}
}

// The URL selects go-redis's parser of its topology: a Cluster's ?addr=
// seeds and Sentinel's ?master_name= are read too.
func TestURLTopologies(t *testing.T) {
	o, err := Config{URL: "redis://a:1?addr=b:2&addr=c:3"}.options()
	if err != nil || o.cluster == nil || strings.Join(o.cluster.Addrs, ",") != "a:1,b:2,c:3" {
		t.Fatalf("cluster URL: %+v, %v", o.cluster, err)
	}
	o, err = Config{URL: "redis://s:pw@a:26379/2?master_name=m&addr=b:26379&password=mpw"}.options()
	if f := o.failover; err != nil || f == nil || f.MasterName != "m" || f.DB != 2 || f.SentinelPassword != "pw" ||
		f.Password != "mpw" || strings.Join(f.SentinelAddrs, ",") != "a:26379,b:26379" {
		t.Fatalf("failover URL: %+v, %v", o.failover, err)
	}
	o, err = Config{URL: "redis://a:26379", MasterName: "m", Password: "mpw"}.options()
	if err != nil || o.failover == nil || o.failover.MasterName != "m" || o.failover.Password != "mpw" {
		t.Fatalf("MasterName with a URL: %+v, %v", o.failover, err)
	}
}

// The documented default of ReadTimeout and WriteTimeout is 3s; go-redis's
// own became 5s, and a zero Config got that.
func TestConfigOptions_DefaultIOTimeoutsAre3s(t *testing.T) {
	for _, cfg := range []Config{{}, {URL: "redis://h:1/0"}, {Addrs: []string{"a:1", "b:2"}}} {
		if o := builtOptions(t, cfg); o.ReadTimeout != 3*time.Second || o.WriteTimeout != 3*time.Second {
			t.Errorf("%+v: ReadTimeout %v, WriteTimeout %v, want 3s", cfg, o.ReadTimeout, o.WriteTimeout)
		}
	}
	if o := builtOptions(t, Config{ReadTimeout: time.Second, WriteTimeout: 2 * time.Second}); o.ReadTimeout != time.Second || o.WriteTimeout != 2*time.Second {
		t.Errorf("set timeouts not kept: %v %v", o.ReadTimeout, o.WriteTimeout)
	}
}

// go-redis waits for a pooled connection ReadTimeout + 1s: the longest
// ReadTimeout overflowed it into a negative wait. It saturates.
func TestConfigOptions_LongestReadTimeoutKeepsAPositivePoolWait(t *testing.T) {
	if o := builtOptions(t, Config{ReadTimeout: 1<<63 - 1}); o.PoolTimeout != 1<<63-1 {
		t.Fatalf("PoolTimeout %v", o.PoolTimeout)
	}
}

func TestConfigOptions(t *testing.T) {
	tests := []struct {
		name     string
		cfg      Config
		wantAddr string
		wantDB   int
		wantTLS  bool
		wantUser string
		wantErr  string // substring naming the field
	}{
		{name: "zero value is localhost", cfg: Config{}, wantAddr: "localhost:6379"},
		{name: "host and port", cfg: Config{Host: "redis.internal", Port: 6380}, wantAddr: "redis.internal:6380"},
		{name: "ipv6 host", cfg: Config{Host: "::1", Port: 6380}, wantAddr: "[::1]:6380"},
		{name: "ipv6 host in brackets", cfg: Config{Host: "[fe80::1%eth0]"}, wantAddr: "[fe80::1%eth0]:6379"},
		{name: "url with db and user", cfg: Config{URL: "redis://alice:pw@10.0.0.1:7000/3"}, wantAddr: "10.0.0.1:7000", wantDB: 3, wantUser: "alice"},
		{name: "rediss enables tls", cfg: Config{URL: "rediss://cache.example:6380"}, wantAddr: "cache.example:6380", wantTLS: true},
		{name: "unix socket", cfg: Config{URL: "unix:///run/redis.sock?db=2"}, wantAddr: "/run/redis.sock", wantDB: 2},
		{name: "cluster addrs", cfg: Config{Addrs: []string{"a:7000", "b:7001", "c:7002"}}, wantAddr: "a:7000,b:7001,c:7002"},
		{name: "largest db", cfg: Config{DB: 1<<31 - 1}, wantAddr: "localhost:6379", wantDB: 1<<31 - 1},
		{name: "bad scheme", cfg: Config{URL: "http://x:1"}, wantErr: "Config.URL"},
		{name: "url and addrs", cfg: Config{URL: "redis://x:1", Addrs: []string{"y:2"}}, wantErr: "Config.URL"},
		{name: "bad db in url", cfg: Config{URL: "redis://x:1/abc"}, wantErr: "Config.URL"},
		{name: "port out of range", cfg: Config{Port: 70000}, wantErr: "Config.Port"},
		{name: "host with port", cfg: Config{Host: "127.0.0.1:6380"}, wantErr: "invalid Config.Host: \"127.0.0.1:6380\" holds a port"},
		{name: "ipv6 host with port", cfg: Config{Host: "[::1]:6380"}, wantErr: "Config.Host"},
		{name: "addr without port", cfg: Config{Addrs: []string{"a:7000", "b"}}, wantErr: "Config.Addrs[1]"},
		{name: "bare ipv6 addr", cfg: Config{Addrs: []string{"::1"}}, wantErr: "Config.Addrs[0]"},
		{name: "negative db", cfg: Config{DB: -1}, wantErr: "Config.DB"},
		{name: "negative db in url", cfg: Config{URL: "redis://h:1/-1"}, wantErr: "invalid Config.URL: database -1 is negative"},
		{name: "db on cluster", cfg: Config{Addrs: []string{"a:1", "b:2"}, DB: 1}, wantErr: "Config.DB"},
		// The URL's database was dropped in silence on a Cluster.
		{name: "url db on cluster", cfg: Config{URL: "redis://127.0.0.1:7000/3", Cluster: true}, wantErr: "invalid Config.URL: database 3, but Redis Cluster has only database 0"},
		{name: "negative pool", cfg: Config{PoolSize: -1}, wantErr: "Config.PoolSize"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.wantErr != "" {
				if err := tt.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			o := builtOptions(t, tt.cfg)
			if o.Addr != tt.wantAddr {
				t.Errorf("Addr = %v, want %v", o.Addr, tt.wantAddr)
			}
			if o.DB != tt.wantDB {
				t.Errorf("DB = %d, want %d", o.DB, tt.wantDB)
			}
			if (o.TLSConfig != nil) != tt.wantTLS {
				t.Errorf("TLS = %v, want %v", o.TLSConfig != nil, tt.wantTLS)
			}
			if o.Username != tt.wantUser {
				t.Errorf("Username = %q, want %q", o.Username, tt.wantUser)
			}
			if !o.DisableIdentity {
				t.Error("CLIENT SETINFO must be off by default")
			}
		})
	}
}

func TestParseURLNeverEchoesPassword(t *testing.T) {
	_, err := ParseURL("redis://u:hunter2@x:1/notanumber")
	if err == nil {
		t.Fatal("want an error")
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("error leaks the password: %v", err)
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	cfg, err := FromEnv()
	if err != nil || cfg.Host != "localhost" || cfg.Port != 6379 {
		t.Fatalf("no REDIS_URL: got %+v, %v", cfg, err)
	}
	t.Setenv("REDIS_URL", "redis://r:6390/1")
	if cfg, err = FromEnv(); err != nil || cfg.URL != "redis://r:6390/1" {
		t.Fatalf("REDIS_URL: got %+v, %v", cfg, err)
	}
	t.Setenv("REDIS_URL", "mysql://x")
	if _, err = FromEnv(); err == nil || !strings.Contains(err.Error(), "REDIS_URL") {
		t.Fatalf("bad REDIS_URL: err = %v, want one naming REDIS_URL", err)
	}
}

// FuzzParseURL: config parsing never panics, and an error never repeats the
// password of the URL.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"redis://u:pw@h:6379/2", "rediss://h:1", "unix:///tmp/r.sock?db=3", "redis://", "http://x", "redis://h:99999/x", "redis://[::1]:6379/0?dial_timeout=1s",
		"redis://default:123/Tr0ub4dorXyz@redis.internal:6379/0", "redis://default:?Tr0ub4dorXyz@redis.internal:6379/0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		_, err := ParseURL(raw)
		if err == nil {
			_, err = Config{URL: raw}.options()
		}
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "Config.URL") {
			t.Fatalf("error does not name the field: %v", err)
		}
		if u, perr := url.Parse(raw); perr == nil {
			// The scheme is echoed on purpose ("scheme \"http\" is not …"); a
			// password that happens to be part of it is not leaked by that.
			if p, ok := u.User.Password(); ok && len(p) >= 6 && strings.Contains(err.Error(), p) && !strings.Contains(u.Scheme, p) {
				t.Fatalf("error repeats the password %q: %v", p, err)
			}
		}
		// What the writer meant as the password, whatever url.Parse reads:
		// after the first ':' of the text between "://" and the last '@'.
		// No 8 characters of it may be repeated (a password holding an
		// unescaped '/' was read as host and path, and its tail repeated).
		_, rest, _ := strings.Cut(raw, "://")
		if at := strings.LastIndexByte(rest, '@'); at >= 0 {
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
				for i := 0; i+8 <= len(pw); i++ {
					if w := pw[i : i+8]; strings.Contains(err.Error(), w) && !strings.Contains(rest[at:], w) && !strings.Contains(raw[:strings.Index(raw, "://")], w) {
						t.Fatalf("error repeats %q of the password: %v", w, err)
					}
				}
			}
		}
	})
}

// A URL that is wrong in a common way gets an error that says how to fix
// it, and never shows the credentials.
func TestParseURL_ErrorsSayHowToFixIt(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://127.0.0.1:notaport/0": `storefx: invalid Config.URL: invalid port ":notaport" after host`,
		"redis://h:6379/0?nosuch=3":    `storefx: invalid Config.URL: unexpected option: nosuch`,
		// A password with an unescaped '/' or '?' was read as host, path and
		// options, and the error repeated its tail.
		"redis://default:123/Tr0ub4dorXyz@redis.internal:6379/0": `storefx: invalid Config.URL: '@' after the host: a user name or password holding '/', '?' or '#' must be percent-encoded (%2F, %3F, %23); the URL is not shown, it may hold credentials`,
		"redis://default:?Tr0ub4dorXyz@redis.internal:6379/0":    `storefx: invalid Config.URL: '@' after the host: a user name or password holding '/', '?' or '#' must be percent-encoded (%2F, %3F, %23); the URL is not shown, it may hold credentials`,
		"localhost:6379":    `storefx: invalid Config.URL: not a URL: write redis://[user:password@]host:port/db, rediss://… or unix:///path`,
		"pw@localhost:6379": `storefx: invalid Config.URL: not a URL: write redis://[user:password@]host:port/db, rediss://… or unix:///path`,
		// A mistyped separator: the path would hold the password.
		"redis:/app:S3cret://Pass@db:6379":  `storefx: invalid Config.URL: not a URL: write redis://[user:password@]host:port/db, rediss://… or unix:///path`,
		"redis://u:s3cret-pw@h:1/s3cret-pw": `storefx: invalid Config.URL: invalid database number: "xxxxx"`,
	} {
		if _, err := ParseURL(raw); err == nil || err.Error() != want {
			t.Errorf("ParseURL(%q) = %v\n want %s", raw, err, want)
		}
	}
}

// A client name Redis refuses failed every connection's set-up; it fails
// fx.New now.
func TestClientNameRedisRefusesFailsFxNew(t *testing.T) {
	for _, name := range []string{"my app", "app\n", "café"} {
		err := Config{ClientName: name}.Validate()
		var cfgErr *redisfx.ConfigError
		if !errors.As(err, &cfgErr) || cfgErr.Field != "Config.ClientName" {
			t.Errorf("ClientName %q: %v, want a *redisfx.ConfigError naming Config.ClientName", name, err)
		}
	}
	if err := (Config{ClientName: "payments-api#1"}).Validate(); err != nil {
		t.Error(err)
	}
}

// A user name without a password connected as Redis's default user: go-redis
// sends AUTH only with a password (an adversary: REDIS_URL=redis://nosuchuser@…
// started and served as "default"). It is refused, naming where it came from.
func TestUserNameWithoutPassword_Refused(t *testing.T) {
	for _, c := range []struct {
		cfg   Config
		field string
	}{
		{Config{URL: "redis://nosuchuser@127.0.0.1:6379/0"}, "Config.URL"},
		{Config{Username: "app", Host: "127.0.0.1"}, "Config.Username"},
		{Config{MasterName: "m", Addrs: []string{"127.0.0.1:26379"}, SentinelUsername: "s"}, "Config.SentinelUsername"},
	} {
		var ce *redisfx.ConfigError
		if err := c.cfg.Validate(); !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("%+v: %v, want a ConfigError naming %s", c.cfg, err, c.field)
		}
	}
	for _, ok := range []Config{
		{URL: "redis://app:pw@127.0.0.1:6379/0"},
		{URL: "redis://app@127.0.0.1:6379/0", Password: "pw"},
		{Username: "app", Password: "pw", Host: "127.0.0.1"},
		{URL: "redis://:pw@127.0.0.1:6379/0"},
	} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
}

// The documented default PoolSize is 10 per CPU per node; go-redis gives a
// Cluster node 5 per CPU when it is left zero. An explicit size is kept.
func TestNew_DefaultPoolSizeIsTenPerCPUOnEveryKindOfClient(t *testing.T) {
	want := 10 * runtime.GOMAXPROCS(0)
	for _, cfg := range []Config{{Addrs: []string{"127.0.0.1:1"}}, {Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}}} {
		c, err := New("default", cfg)
		if err != nil {
			t.Fatal(err)
		}
		var got int
		switch u := c.Unwrap().(type) {
		case *redis.Client:
			got = u.Options().PoolSize
		case *redis.ClusterClient:
			got = u.Options().PoolSize
		}
		_ = c.Close()
		if got != want {
			t.Errorf("%v: a %T with PoolSize %d, want %d", cfg.Addrs, c.Unwrap(), got, want)
		}
	}
	c, err := New("default", Config{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, PoolSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.Unwrap().(*redis.ClusterClient).Options().PoolSize; got != 3 {
		t.Errorf("an explicit PoolSize of 3 became %d", got)
	}
}
