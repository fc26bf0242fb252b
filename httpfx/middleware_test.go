package httpfx

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// opaqueCtx is a context that is not a fmt.Stringer and holds a secret.
type opaqueCtx struct {
	context.Context
	secret string
}

type parentKey struct{}

// The request state prints as context.WithValue's nodes do: its parent's
// String, or the parent's type, never a parent's contents.
func TestRequestState_PrintsLikeAContext(t *testing.T) {
	t.Parallel()
	for parent, want := range map[context.Context]string{
		context.WithValue(context.Background(), parentKey{}, "v"):   "context.Background.WithValue(httpfx.parentKey, v).WithValue(httpfx request state)",
		opaqueCtx{Context: context.Background(), secret: "hunter2"}: "httpfx.opaqueCtx.WithValue(httpfx request state)",
	} {
		if got := fmt.Sprint(&requestState{Context: parent}); got != want || strings.Contains(got, "hunter2") {
			t.Errorf("printed %q, want %q", got, want)
		}
	}
}
