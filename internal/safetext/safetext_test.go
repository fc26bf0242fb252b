package safetext

import (
	"errors"
	"testing"
)

// selfPanic's Error panics with a selfPanic: printing the panic value
// panics again, which fmt re-raises.
type selfPanic struct{}

func (selfPanic) Error() string { panic(selfPanic{}) }

type nilPointer struct{ msg string }

func (e *nilPointer) Error() string { return e.msg }

func TestOf(t *testing.T) {
	var typedNil *nilPointer
	for _, c := range []struct {
		v    any
		want string
		ok   bool
	}{
		{"plain", "plain", true},
		{errors.New("boom"), "boom", true},
		{selfPanic{}, "<a safetext.selfPanic whose Error or String method panics>", false},
		{error(typedNil), "<nil>", true}, // fmt prints a nil pointer receiver's panic as <nil>
	} {
		got, ok := Of(c.v)
		if got != c.want || ok != c.ok {
			t.Errorf("Of(%T) = %q, %v; want %q, %v", c.v, got, ok, c.want, c.ok)
		}
	}
}

func TestError(t *testing.T) {
	if Error(nil) != nil {
		t.Fatal("Error(nil) is not nil")
	}
	plain := errors.New("boom")
	if got := Error(plain); got.Error() != "boom" || errors.Unwrap(got) != nil {
		t.Fatal("an error whose text reads was replaced")
	}
	err := Error(selfPanic{})
	if err.Error() != "<a safetext.selfPanic whose Error method panics>" || !errors.Is(err, selfPanic{}) {
		t.Fatalf("%q does not name the type or unwrap to it", err.Error())
	}
	var typedNil *nilPointer
	if err := Error(typedNil); err.Error() != "<a *safetext.nilPointer whose Error method panics>" {
		t.Fatalf("a typed nil pointer: %q", err.Error())
	}
}
