package storefx

import (
	"errors"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx"
)

// The documented default of ReadTimeout and WriteTimeout is 3s; go-redis's
// own became 5s, and a zero Config got that.
func TestConfigOptions_DefaultIOTimeoutsAre3s(t *testing.T) {
	for _, cfg := range []Config{{}, {URL: "redis://h:1/0"}, {Addrs: []string{"a:1", "b:2"}}} {
		o, err := cfg.options()
		if err != nil {
			t.Fatal(err)
		}
		if o.ReadTimeout != 3*time.Second || o.WriteTimeout != 3*time.Second {
			t.Errorf("%+v: ReadTimeout %v, WriteTimeout %v, want 3s", cfg, o.ReadTimeout, o.WriteTimeout)
		}
	}
	o, _ := Config{ReadTimeout: time.Second, WriteTimeout: 2 * time.Second}.options()
	if o.ReadTimeout != time.Second || o.WriteTimeout != 2*time.Second {
		t.Errorf("set timeouts not kept: %v %v", o.ReadTimeout, o.WriteTimeout)
	}
}

func TestConfigOptions(t *testing.T) {
	tests := []struct {
		name      string
		cfg       Config
		wantAddrs []string
		wantDB    int
		wantTLS   bool
		wantUser  string
		wantErr   string // substring naming the field
	}{
		{name: "zero value is localhost", cfg: Config{}, wantAddrs: []string{"localhost:6379"}},
		{name: "host and port", cfg: Config{Host: "redis.internal", Port: 6380}, wantAddrs: []string{"redis.internal:6380"}},
		{name: "url with db and user", cfg: Config{URL: "redis://alice:pw@10.0.0.1:7000/3"},
			wantAddrs: []string{"10.0.0.1:7000"}, wantDB: 3, wantUser: "alice"},
		{name: "rediss enables tls", cfg: Config{URL: "rediss://cache.example:6380"}, wantAddrs: []string{"cache.example:6380"}, wantTLS: true},
		{name: "unix socket", cfg: Config{URL: "unix:///run/redis.sock?db=2"}, wantAddrs: []string{"/run/redis.sock"}, wantDB: 2},
		{name: "cluster addrs", cfg: Config{Addrs: []string{"a:7000", "b:7001", "c:7002"}}, wantAddrs: []string{"a:7000", "b:7001", "c:7002"}},
		{name: "bad scheme", cfg: Config{URL: "http://x:1"}, wantErr: "Config.URL"},
		{name: "url without host", cfg: Config{URL: "redis://"}, wantErr: "Config.URL"},
		{name: "url and addrs", cfg: Config{URL: "redis://x:1", Addrs: []string{"y:2"}}, wantErr: "Config.URL"},
		{name: "bad db in url", cfg: Config{URL: "redis://x:1/abc"}, wantErr: "Config.URL"},
		{name: "port out of range", cfg: Config{Port: 70000}, wantErr: "Config.Port"},
		{name: "addr without port", cfg: Config{Addrs: []string{"a:7000", "b"}}, wantErr: "Config.Addrs[1]"},
		{name: "negative db", cfg: Config{DB: -1}, wantErr: "Config.DB"},
		{name: "db on cluster", cfg: Config{Addrs: []string{"a:1", "b:2"}, DB: 1}, wantErr: "Config.DB"},
		// The URL's database was dropped in silence on a Cluster.
		{name: "url db on cluster", cfg: Config{URL: "redis://127.0.0.1:7000/3", Cluster: true}, wantErr: "invalid Config.URL: database 3, but Redis Cluster has only database 0"},
		// Beyond SELECT's signed 32-bit argument: refused by every server,
		// which start-up reported as "unreachable" after ConnectTimeout.
		{name: "db beyond int32", cfg: Config{DB: 1 << 31}, wantErr: "invalid Config.DB: 2147483648 is beyond any Redis database number"},
		{name: "url db beyond int32", cfg: Config{URL: "redis://127.0.0.1:7000/99999999999"}, wantErr: "invalid Config.URL: database number 99999999999 is beyond"},
		{name: "largest db", cfg: Config{DB: 1<<31 - 1}, wantAddrs: []string{"localhost:6379"}, wantDB: 1<<31 - 1},
		{name: "url largest db", cfg: Config{URL: "redis://h:1/2147483647"}, wantAddrs: []string{"h:1"}, wantDB: 1<<31 - 1},
		{name: "negative pool", cfg: Config{PoolSize: -1}, wantErr: "Config.PoolSize"},
		{name: "negative timeout", cfg: Config{ReadTimeout: -time.Second}, wantErr: "Config.ReadTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := tt.cfg.options()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(o.Addrs, ",") != strings.Join(tt.wantAddrs, ",") {
				t.Errorf("Addrs = %v, want %v", o.Addrs, tt.wantAddrs)
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
	env := map[string]string{}
	get := func(k string) string { return env[k] }
	cfg, err := fromEnv(get)
	if err != nil || cfg.Host != "localhost" || cfg.Port != 6379 {
		t.Fatalf("no REDIS_URL: got %+v, %v", cfg, err)
	}
	env["REDIS_URL"] = "redis://r:6390/1"
	if cfg, err = fromEnv(get); err != nil || cfg.URL != "redis://r:6390/1" {
		t.Fatalf("REDIS_URL: got %+v, %v", cfg, err)
	}
	env["REDIS_URL"] = "mysql://x"
	if _, err = fromEnv(get); err == nil || !strings.Contains(err.Error(), "REDIS_URL") {
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

// A URL that is wrong in a common way gets an error that says how to fix it.
func TestParseURL_ErrorsSayHowToFixIt(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://127.0.0.1:notaport/0": `storefx: invalid Config.URL: port "notaport" is not a TCP port (1-65535)`,
		"redis://127.0.0.1:6379/-1":    `storefx: invalid Config.URL: database number -1 is negative`,
		"redis://u:s3cret@h:99999/0":   `storefx: invalid Config.URL: port "99999" is not a TCP port (1-65535)`,
		// Options were accepted and ignored: the pool stayed at 20.
		"redis://h:6379/0?pool_size=3":   `storefx: invalid Config.URL: option "pool_size" is not read from the URL: set Config.PoolSize`,
		"redis://h:6379/0?max_retries=0": `storefx: invalid Config.URL: option "max_retries" is not read from the URL: set the matching Config field`,
		// A password with an unescaped '/' or '?' was read as host, path and
		// options, and the error repeated its tail (an adversary's find).
		"redis://default:123/Tr0ub4dorXyz@redis.internal:6379/0": `storefx: invalid Config.URL: '@' after the host: a user name or password holding '/', '?' or '#' must be percent-encoded (%2F, %3F, %23); the URL is not shown, it may hold credentials`,
		"redis://default:?Tr0ub4dorXyz@redis.internal:6379/0":    `storefx: invalid Config.URL: '@' after the host: a user name or password holding '/', '?' or '#' must be percent-encoded (%2F, %3F, %23); the URL is not shown, it may hold credentials`,
		"localhost:6379":        `storefx: invalid Config.URL: "localhost:6379" is an address, not a URL: write redis://localhost:6379`,
		"pw@localhost:6379":     `storefx: invalid Config.URL: not a URL (redis://host:port/db, rediss://… or unix:///path)`,
		"redis://u:pa/ss@h:x/0": `storefx: invalid Config.URL: not a URL (redis://host:port/db, rediss://… or unix:///path)`,
		// Dialled as the DNS name "127.0.0.1:6379" until ConnectTimeout, and
		// start-up failed naming no field (an adversary's find).
		"redis://127.0.0.1:6379:6379/0":            `storefx: invalid Config.URL: the host "127.0.0.1:6379:6379" is neither a host name with a port nor an IPv6 address in brackets (redis://[::1]:6379)`,
		"redis://u:p@h:1:2":                        `storefx: invalid Config.URL: the host "h:1:2" is neither a host name with a port nor an IPv6 address in brackets (redis://[::1]:6379)`,
		"redis://:s3cret@127.0.0.1,127.0.0.2:6379": `storefx: invalid Config.URL: the host "127.0.0.1,127.0.0.2:6379" is neither a host name with a port nor an IPv6 address in brackets (redis://[::1]:6379)`,
		"redis://:s3cret@127.0.0.1;6379":           `storefx: invalid Config.URL: the host "127.0.0.1;6379" is neither a host name with a port nor an IPv6 address in brackets (redis://[::1]:6379)`,
	} {
		if _, err := ParseURL(raw); err == nil || err.Error() != want {
			t.Errorf("ParseURL(%q) = %v\n want %s", raw, err, want)
		}
	}
}

// Config.Host holding host:port passed Validate; joined with Config.Port it
// made "[127.0.0.1:6380]:6379", and start-up failed after ConnectTimeout
// with "no such host", naming no field. IPv6 literals, bare or in
// brackets, are hosts, not host:port.
func TestConfigHost_PortIsRefusedIPv6IsNot(t *testing.T) {
	for host, want := range map[string]string{
		"127.0.0.1:45345":   `storefx: invalid Config.Host: "127.0.0.1:45345" is host:port: put the host ("127.0.0.1") in Config.Host and the port (45345) in Config.Port`,
		"redis.internal:80": `storefx: invalid Config.Host: "redis.internal:80" is host:port: put the host ("redis.internal") in Config.Host and the port (80) in Config.Port`,
		"[::1]:6380":        `storefx: invalid Config.Host: "[::1]:6380" is host:port: put the host ("::1") in Config.Host and the port (6380) in Config.Port`,
		"localhost:":        `storefx: invalid Config.Host: "localhost:" holds a ':' and a port part: put only the host in Config.Host and the port in Config.Port`,
		"a:b:c":             `storefx: invalid Config.Host: "a:b:c" is neither a host name nor an IPv6 address`,
		"fe80::1%eth0]:80":  `storefx: invalid Config.Host: "fe80::1%eth0]:80" is neither a host name nor an IPv6 address`,
		"[redis]":           `storefx: invalid Config.Host: "[redis]" is not a host name`,
		"redis/0":           `storefx: invalid Config.Host: "redis/0" is not a host name`,
		"10.0.0.1,10.0.0.2": `storefx: invalid Config.Host: "10.0.0.1,10.0.0.2" is not a host name`,
		"256.1.1.1":         `storefx: invalid Config.Host: "256.1.1.1" is not a host name`,
		"1.2.3.4.5":         `storefx: invalid Config.Host: "1.2.3.4.5" is not a host name`,
		"foo..bar":          `storefx: invalid Config.Host: "foo..bar" is not a host name`,
		".":                 `storefx: invalid Config.Host: "." is not a host name`,
	} {
		err := Config{Host: host, Port: 6379}.Validate()
		var cfgErr *redisfx.ConfigError
		if !errors.As(err, &cfgErr) || cfgErr.Field != "Config.Host" || err.Error() != want {
			t.Errorf("Host %q: err = %v\n want *redisfx.ConfigError %s", host, err, want)
		}
	}
	for host, addr := range map[string]string{
		"::1": "[::1]:6380", "[::1]": "[::1]:6380", "fe80::1%eth0": "[fe80::1%eth0]:6380",
		"::ffff:10.0.0.1": "[::ffff:10.0.0.1]:6380", "10.0.0.1": "10.0.0.1:6380", "redis.internal": "redis.internal:6380",
		"redis.internal.": "redis.internal.:6380", "my_redis": "my_redis:6380", "localhost": "localhost:6380",
		"redis-0.redis.default.svc.cluster.local": "redis-0.redis.default.svc.cluster.local:6380", "xn--bcher-kva.example": "xn--bcher-kva.example:6380",
		"1password.io": "1password.io:6380",
		// Names /etc/hosts may give, which DNS would refuse (helper-86).
		"123456789012": "123456789012:6380", "-weird": "-weird:6380",
	} {
		o, err := Config{Host: host, Port: 6380}.options()
		if err != nil || len(o.Addrs) != 1 || o.Addrs[0] != addr {
			t.Errorf("Host %q: %v, %v; want address %s", host, o, err, addr)
		}
	}
}

// Config.Addrs (a server, Cluster seeds or Sentinels) gets the same check of
// its hosts, and a bare IPv6 address is told how to add the port.
func TestConfigAddrs_HostsAreChecked(t *testing.T) {
	for addr, want := range map[string]string{
		"::1":             `storefx: invalid Config.Addrs[1]: "::1" is an IPv6 address without a port: write [::1]:6379`,
		"[::1]":           `storefx: invalid Config.Addrs[1]: "[::1]" is an IPv6 address without a port: write [::1]:6379`,
		"[redis:1]:6379":  `storefx: invalid Config.Addrs[1]: "[redis:1]:6379": "redis:1" in brackets is not an IPv6 address`,
		"redis/0:6379":    `storefx: invalid Config.Addrs[1]: "redis/0:6379": "redis/0" is not a host name`,
		"h:6379:6379":     `storefx: invalid Config.Addrs[1]: "h:6379:6379" is not host:port`,
		"redis.internal":  `storefx: invalid Config.Addrs[1]: "redis.internal" is not host:port`,
		"redis.internal:": `storefx: invalid Config.Addrs[1]: "redis.internal:" has no valid port`,
	} {
		for _, cfg := range []Config{{Addrs: []string{"a:1", addr}}, {Addrs: []string{"a:1", addr}, MasterName: "mymaster"}} {
			err := cfg.Validate()
			var cfgErr *redisfx.ConfigError
			if !errors.As(err, &cfgErr) || cfgErr.Field != "Config.Addrs[1]" || err.Error() != want {
				t.Errorf("Addrs %q (MasterName %q): err = %v\n want %s", cfg.Addrs, cfg.MasterName, err, want)
			}
		}
	}
	if err := (Config{Addrs: []string{"[::1]:7000", "[fe80::1%eth0]:7001", "10.0.0.1:7002"}}).Validate(); err != nil {
		t.Errorf("IPv6 seeds refused: %v", err)
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
