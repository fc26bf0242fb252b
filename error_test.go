package redisfx_test

import (
	"errors"
	"fmt"
	"testing"

	"go.uber.org/goleak"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/idempotencyfx"
	"github.com/redisfx/redisfx/storefx"
	"github.com/redisfx/redisfx/tracingfx"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every module reports an invalid Config with one error type and one
// message form: "<package>: invalid Config.<Field>: <reason>".
func TestConfigErrorsShareOneShape(t *testing.T) {
	for _, c := range []struct {
		err       error
		pkg, want string
	}{
		{idempotencyfx.Config{LockTimeout: -1}.Validate(), "idempotencyfx", "idempotencyfx: invalid Config.LockTimeout: -1ns is too short (minimum 10ms)"},
		{storefx.Config{DB: -1}.Validate(), "storefx", "storefx: invalid Config.DB: -1 is negative"},
		{tracingfx.Config{Exporter: tracingfx.ExporterConfig{Type: "carrier-pigeon"}}.Validate(), "tracingfx",
			`tracingfx: invalid Config.Exporter.Type: "carrier-pigeon" is not otlp, console, jaeger, zipkin or none`},
	} {
		var cfgErr *redisfx.ConfigError
		if !errors.As(c.err, &cfgErr) || cfgErr.Package != c.pkg || c.err.Error() != c.want {
			t.Errorf("got %v (%T), want %q", c.err, c.err, c.want)
			continue
		}
		var base *redisfx.BaseError
		if !errors.As(c.err, &base) || base.Code != redisfx.CodeConfigInvalid {
			t.Errorf("%v: BaseError not found or code %v", c.err, base)
		}
	}
}

func ExampleConfigError() {
	err := idempotencyfx.Config{ErrorPolicy: "fail_closed"}.Validate()
	var cfgErr *redisfx.ConfigError
	if errors.As(err, &cfgErr) {
		fmt.Println(cfgErr.Field)
		fmt.Println(err)
	}
	// Output:
	// Config.ErrorPolicy
	// idempotencyfx: invalid Config.ErrorPolicy: "fail_closed" is not "fail-closed" or "fail-open"
}
