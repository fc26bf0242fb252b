package ratelimitfx

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/internal/redistest"
)

// Redis counts in whole milliseconds, and a window was truncated to them:
// Window 1.0005s counted as 1s, so two rules whose windows differed below a
// millisecond shared one counter, against "distinct rules never share a
// counter". Such a window is now refused, in the Config and in a Rule.

func TestConfig_WindowNotWholeMilliseconds_Refused(t *testing.T) {
	t.Parallel()
	for _, w := range []time.Duration{time.Second + 500*time.Microsecond, time.Millisecond + 1, 500 * time.Microsecond} {
		err := Config{Window: w}.Validate()
		var ce *redisfx.ConfigError
		if !errors.As(err, &ce) || ce.Field != "Config.Window" {
			t.Errorf("Config.Window %v: %v", w, err)
		}
	}
	if err := (Config{Window: 1500 * time.Millisecond}).Validate(); err != nil {
		t.Errorf("Config.Window 1.5s: %v", err)
	}
}

func TestRule_WindowNotWholeMilliseconds_Refused(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, redistest.Start(t), Config{})
	ctx := context.Background()
	for _, pair := range [][2]time.Duration{
		{time.Second, time.Second + 500*time.Microsecond},
		{time.Millisecond, 900 * time.Microsecond},
	} {
		name := "w" + pair[0].String()
		if d, err := l.Check(ctx, Rule{Name: name, Limit: 1, Window: pair[0]}, "client"); err != nil || !d.Allowed {
			t.Fatalf("Window %v: %+v %v", pair[0], d, err)
		}
		d, err := l.Check(ctx, Rule{Name: name, Limit: 1, Window: pair[1]}, "client")
		var ce *redisfx.ConfigError
		if !errors.As(err, &ce) || ce.Field != "Rule.Window" || !strings.Contains(err.Error(), fmt.Sprintf("rule %q", name)) ||
			errors.Is(err, ErrStoreUnavailable) || d.Allowed {
			t.Errorf("Window %v after a check with Window %v: %+v %v (want it refused, not counted with the other)", pair[1], pair[0], d, err)
		}
	}
}

// Limit has no error to return: like chi with a malformed route, it panics
// when the routes are set up, at start-up, naming the rule.
func TestLimit_WindowNotWholeMilliseconds_Panics(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, redistest.Start(t), Config{})
	defer func() {
		err, _ := recover().(error)
		var ce *redisfx.ConfigError
		if !errors.As(err, &ce) || ce.Field != "Rule.Window" || !strings.Contains(err.Error(), `rule "login"`) {
			t.Fatalf("recovered %v", err)
		}
	}()
	l.Limit(Rule{Name: "login", Window: time.Second + time.Microsecond})
}

// Zero fields of a Rule take the Config's defaults; a negative one is
// refused. Before, a negative Window (-1500µs) was taken for the default
// and counted on the 1m rule's counter, and a negative Limit became the
// default limit. (Found by an adversary.)
func TestRule_NegativeFields_Refused(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, redistest.Start(t), Config{Window: time.Minute})
	ctx := context.Background()
	if _, err := l.Check(ctx, Rule{Name: "x", Limit: 1, Window: time.Minute}, "client"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rule  Rule
		field string
	}{
		{Rule{Name: "x", Limit: 1, Window: -1500 * time.Microsecond}, "Rule.Window"},
		{Rule{Name: "x", Limit: 1, Window: -time.Minute}, "Rule.Window"},
		{Rule{Name: "x", Limit: -1, Window: time.Minute}, "Rule.Limit"},
	} {
		d, err := l.Check(ctx, tc.rule, "client")
		var ce *redisfx.ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field || d.Allowed || d.Current != 0 {
			t.Errorf("Check(%+v): %+v %v; want it refused naming %s, nothing counted", tc.rule, d, err, tc.field)
		}
		func() {
			defer func() {
				if err, _ := recover().(error); !errors.As(err, &ce) || ce.Field != tc.field {
					t.Errorf("Limit(%+v) recovered %v; want a panic naming %s", tc.rule, err, tc.field)
				}
			}()
			l.Limit(tc.rule)
		}()
	}
	if d, err := l.Check(ctx, Rule{Name: "x", Limit: 1}, "client"); err != nil || d.Window != time.Minute || d.Current != 2 {
		t.Fatalf("a zero Window takes the Config's: %+v %v", d, err)
	}
}
