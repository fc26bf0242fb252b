package fxconfig_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/redisfx/redisfx/internal/fxconfig"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type config struct {
	Name string
	Hook func() // not comparable: Pick must not use ==
}

func TestPick(t *testing.T) {
	if c, err := fxconfig.Pick(nil, config{}); err != nil || c.Name != "" {
		t.Fatalf("none: %+v %v", c, err)
	}
	if c, err := fxconfig.Pick(nil, config{Name: "v"}); err != nil || c.Name != "v" {
		t.Fatalf("value: %+v %v", c, err)
	}
	if c, err := fxconfig.Pick(&config{Name: "p"}, config{}); err != nil || c.Name != "p" {
		t.Fatalf("pointer: %+v %v", c, err)
	}
	_, err := fxconfig.Pick(&config{Name: "p"}, config{Hook: func() {}})
	if err == nil || err.Error() != "both a fxconfig_test.config and a *fxconfig_test.config are in the Fx graph: supply one of them" {
		t.Fatalf("both: %v", err)
	}
}
