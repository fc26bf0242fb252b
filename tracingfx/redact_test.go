package tracingfx

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redisfx/redisfx/internal/redistest"
)

// spanText is everything a span carries as text: name, attributes, status
// and events with their attributes.
func spanText(s tracetest.SpanStub) string {
	var b strings.Builder
	b.WriteString(s.Name + "\n" + s.Status.Description + "\n")
	for _, kv := range s.Attributes {
		b.WriteString(string(kv.Key) + "=" + kv.Value.String() + "\n")
	}
	for _, e := range s.Events {
		b.WriteString(e.Name + "\n")
		for _, kv := range e.Attributes {
			b.WriteString(string(kv.Key) + "=" + kv.Value.String() + "\n")
		}
	}
	return b.String()
}

// Redis echoes arguments in some error replies. Without IncludeArgs, the
// span of an unknown command (a module command sent to a server without the
// module) carried its key and value in its status and exception event.
func TestRedact_ErrorEchoingArguments_ArgsNotInSpan(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, m := tracedClient(t, srv.URL(), SpanConfig{}, nil)
	key := redistest.Prefix(t) + "user:alice@example.com"
	err := c.Do(context.Background(), "JSON.SET", key, "$", `{"ssn":"123-45-6789"}`).Err()
	if err == nil || !strings.Contains(err.Error(), "alice@example.com") {
		t.Fatalf("the premise: Redis echoes the key in its error, got %v", err)
	}
	s := m.one(t, "redis.JSON.SET")
	text := spanText(s)
	for _, secret := range []string{"alice@example.com", "123-45-6789"} {
		if strings.Contains(text, secret) {
			t.Errorf("%q reached the span:\n%s", secret, text)
		}
	}
	if s.Status.Description != "ERR unknown command" {
		t.Errorf("status = %q, want the message up to its first quote", s.Status.Description)
	}
	if ev := s.Events; len(ev) != 1 || ev[0].Name != "exception" {
		t.Errorf("events = %v, want one exception", ev)
	}
	if attrsOf(s)["error.type"].AsString() != "ERR" {
		t.Errorf("error.type = %v", attrsOf(s)["error.type"])
	}
}

// serverError is an error reply of Redis, as go-redis types it.
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}

// An error without quotes that still holds an argument is reduced to its
// code; one without an argument is kept whole.
func TestRedact_ErrorText(t *testing.T) {
	t.Parallel()
	h := &commandHook{}
	cmd := redis.NewCmd(context.Background(), "set", "secret-key", "v")
	for _, tc := range []struct{ msg, status, want string }{
		{"WRONGTYPE Operation against a key holding the wrong kind of value", "WRONGTYPE", "WRONGTYPE Operation against a key holding the wrong kind of value"},
		{"ERR no such key secret-key here", "ERR", "ERR"},
		{"something about secret-key", "", "redis error (message not shown: it holds an argument)"},
		{"ERR Error in ACL SETUSER modifier '<pw': Syntax error", "ERR", "ERR Error in ACL SETUSER modifier"},
	} {
		if got := h.errorText(serverError(tc.msg), tc.status, cmd); got != tc.want {
			t.Errorf("errorText(%q) = %q, want %q", tc.msg, got, tc.want)
		}
	}
	// An argument go-redis writes through a pointer (idempotencyfx's
	// scripts pass theirs so) is found as the value it points to.
	secret := "secret-owner"
	byPointer := redis.NewCmd(context.Background(), "evalsha", "sha", 1, "k", &secret)
	if got := h.errorText(serverError("ERR owner secret-owner unknown"), "ERR", byPointer); got != "ERR" {
		t.Errorf("errorText of a pointer-held argument = %q, want %q", got, "ERR")
	}
	shown := &commandHook{spans: SpanConfig{IncludeArgs: true}}
	if got := shown.errorText(serverError("ERR x 'secret-key'"), "ERR", cmd); got != "ERR x 'secret-key'" {
		t.Errorf("with IncludeArgs the message is whole, got %q", got)
	}
}

// A credential rotation that fails: Redis's error names the modifier, the
// old password. It never reaches the span, not even with IncludeArgs.
func TestRedact_ACLSetuserError_PasswordNeverInSpan(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	for _, spans := range []SpanConfig{{}, {IncludeArgs: true, IncludeResult: true}} {
		c, m := tracedClient(t, srv.URL(), spans, nil)
		err := c.Do(context.Background(), "ACL", "SETUSER", "app", "on", ">n3w-S3cret", "<0ld-S3cret").Err()
		if err == nil || !strings.Contains(err.Error(), "0ld-S3cret") {
			t.Fatalf("the premise: Redis echoes the modifier, got %v", err)
		}
		s := m.one(t, "redis.ACL SETUSER")
		text := spanText(s)
		for _, secret := range []string{"n3w-S3cret", "0ld-S3cret"} {
			if strings.Contains(text, secret) {
				t.Errorf("IncludeArgs %v: %q reached the span:\n%s", spans.IncludeArgs, secret, text)
			}
		}
	}
}

// AUTH (and every credential command) inside a pipeline is written with ?
// whatever IncludeArgs says; it was skipped only as a pipeline's first.
func TestRedact_AuthInsideAPipeline_PasswordNeverInSpan(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t, redistest.WithArgs("--requirepass", "hunter2-secret"))
	c, m := tracedClient(t, "redis://:hunter2-secret@"+srv.Addr(), SpanConfig{IncludeArgs: true, IncludeResult: true}, nil)
	ctx := context.Background()
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Ping(ctx)
		p.Auth(ctx, "hunter2-secret")
		p.ConfigSet(ctx, "masterauth", "hunter2-secret")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	s := m.one(t, "redis.PIPELINE")
	if text := spanText(s); strings.Contains(text, "hunter2-secret") {
		t.Fatalf("the password reached the pipeline's span:\n%s", text)
	}
	if st := attrsOf(s)["db.statement"].AsString(); st != "PING\nAUTH ?\nCONFIG SET ? ? ?" {
		t.Errorf("db.statement = %q", st)
	}
}

// Spans.MaxArgLength cut a two-byte character in half: the invalid UTF-8
// then made the export of the whole batch fail.
func TestRedact_MaxArgLengthNeverSplitsACharacter(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, m := tracedClient(t, srv.URL(), SpanConfig{IncludeArgs: true, IncludeResult: true, MaxArgLength: 16}, nil)
	key := redistest.Prefix(t) + "k"
	value := strings.Repeat("a", 15-len(key)%15) + "ëëëëëëëë"
	c.Set(context.Background(), key, value, time.Minute)
	c.Get(context.Background(), key)
	for _, s := range m.spans() {
		for _, kv := range s.Attributes {
			if !utf8.ValidString(kv.Value.String()) {
				t.Errorf("%s %s = %q is not UTF-8", s.Name, kv.Key, kv.Value.String())
			}
		}
	}
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{{"abë", 3, "ab"}, {"abë", 4, "abë"}, {"ab", 5, "ab"}, {"ëë", 1, ""}} {
		if got := cutUTF8(tc.s, tc.n); got != tc.want {
			t.Errorf("cutUTF8(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

// Found by an adversary (helper-75): Redis prints some numeric arguments
// rounded ("%f"), so no comparison with the arguments finds them in its
// error: a caller's GPS position, latitude and longitude swapped, reached
// the span as "ERR invalid longitude,latitude pair 35.689487,139.691706".
// A message holding a number of three or more digits is reduced to its code.
func TestRedact_ErrorEchoingRoundedNumbers_ReducedToCode(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, m := tracedClient(t, srv.URL(), SpanConfig{}, nil)
	q := &redis.GeoSearchQuery{Longitude: 35.6894875, Latitude: 139.6917064, Radius: 5, RadiusUnit: "km"}
	err := c.GeoSearch(context.Background(), redistest.Prefix(t)+"stores", q).Err()
	if err == nil || !strings.Contains(err.Error(), "35.689") {
		t.Fatalf("the premise: Redis prints the rounded coordinates in its error, got %v", err)
	}
	s := m.one(t, "redis.GEOSEARCH")
	if text := spanText(s); strings.Contains(text, "35.689") || strings.Contains(text, "139.691") {
		t.Errorf("the coordinates reached the span:\n%s", text)
	}
	if s.Status.Description != "ERR" {
		t.Errorf("status = %q, want ERR", s.Status.Description)
	}
}

// Found by an adversary (helper-76): a script's error built from its
// arguments reached spans without IncludeArgs, as the error's "code"
// (error_reply(ARGV[1] .. " is locked")), as a number reformatted without a
// run of three digits (12.50 printed 12.5), or upper-cased. Each case holds
// the caller's data that must not reach any span. A private server: the
// FUNCTION LOAD case leaves a library behind.
func TestRedact_ScriptErrorsEchoingArguments(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	ctx := context.Background()
	type tc struct {
		name    string
		run     func(c redis.UniversalClient) error
		secrets []string
	}
	cases := []tc{
		{"lua number reformatted", func(c redis.UniversalClient) error {
			return c.Eval(ctx, "return redis.error_reply('ERR amount ' .. tonumber(ARGV[1]) .. ' over limit')", []string{"acct"}, "12.50").Err()
		}, []string{"12.5"}},
		{"lua number in scientific notation", func(c redis.UniversalClient) error { // helper-79
			return c.Eval(ctx, "return redis.error_reply('ERR amount ' .. tonumber(ARGV[1]) .. ' over limit')", []string{"acct"}, "12000000000000000").Err()
		}, []string{"1.2e+16"}},
		{"lua error() number", func(c redis.UniversalClient) error {
			// Seven digits: a short number could match the random port or a duration.
			return c.Eval(ctx, "error(tonumber(ARGV[1]))", []string{"acct"}, "0x7A35C1").Err()
		}, []string{"8009153"}},
		{"lua IP", func(c redis.UniversalClient) error {
			return c.Eval(ctx, "return redis.error_reply('ERR blocked ' .. ARGV[1])", []string{"acct"}, "10.0.0.1").Err()
		}, []string{"10.0.0.1"}},
		{"function lib exists", func(c redis.UniversalClient) error {
			code := "#!lua name=alicelib\nredis.register_function('f', function() return 1 end)"
			_ = c.FunctionLoad(ctx, code).Err()
			return c.FunctionLoad(ctx, code).Err()
		}, []string{"alicelib"}},
		{"lua key upper", func(c redis.UniversalClient) error {
			return c.Eval(ctx, "return redis.error_reply('ERR no user ' .. string.upper(KEYS[1]))", []string{"alice"}).Err()
		}, []string{"ALICE"}},
		{"status code is arg", func(c redis.UniversalClient) error {
			return c.Eval(ctx, "return redis.error_reply(ARGV[1] .. ' is locked')", []string{"k"}, "ALICE_SMITH").Err()
		}, []string{"ALICE_SMITH"}},
		{"tx pipeline", func(c redis.UniversalClient) error {
			_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, "k", "v", 0)
				p.Do(ctx, "FOO.BAR", "alice@example.com")
				return nil
			})
			return err
		}, []string{"alice@example.com"}},
	}
	for _, cs := range cases {
		t.Run(cs.name, func(t *testing.T) {
			c, m := tracedClient(t, srv.URL(), SpanConfig{}, nil)
			err := cs.run(c)
			if err == nil {
				t.Fatal("the premise: the command fails")
			}
			for _, s := range m.spans() {
				text := spanText(s)
				for _, sec := range cs.secrets {
					if strings.Contains(text, sec) {
						t.Errorf("err %v: %q reached span %s: status %q", err, sec, s.Name, s.Status.Description)
					}
				}
			}
		})
	}
}
