package httpfx

import (
	"fmt"
	"reflect"

	"go.uber.org/fx"
)

// ContextValue is a value that the context of every request served by the
// router carries under Key, without an allocation per request: how a module
// hands route-level code an object of the app. Key follows
// context.WithValue's rules; a Key given twice fails the router's
// construction.
type ContextValue struct {
	Key   any
	Value any
}

// ContextValueGroup is the value group of ContextValue.
const ContextValueGroup = "redisfx.http.context_values"

// AsContextValue annotates a constructor of ContextValue so that its
// result joins the context value group.
func AsContextValue(constructor any) any {
	return fx.Annotate(constructor, fx.ResultTags(`group:"`+ContextValueGroup+`"`))
}

// checkContextValues refuses what context.WithValue would panic on, and a
// key given twice (which value would win is otherwise an accident of order).
func checkContextValues(values []ContextValue) error {
	for i, v := range values {
		// The value, not its type: an interface field may hold a slice (nil
		// is not comparable either).
		if !reflect.ValueOf(v.Key).Comparable() {
			return fmt.Errorf("httpfx: ContextValue.Key of type %T is not comparable", v.Key)
		}
		for _, w := range values[:i] {
			if w.Key == v.Key {
				return fmt.Errorf("httpfx: ContextValue.Key %T(%v) is given twice", v.Key, v.Key)
			}
		}
	}
	return nil
}
