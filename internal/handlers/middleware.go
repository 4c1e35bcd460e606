package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"

	"github.com/inboxhq/inbox/internal/labels"
)

// Middleware wraps a Handler with what runs around it. It is the one way
// this package (and a user's code) adds behaviour to handlers: Resolve
// wraps every routed handler in Recover and ShopifyEventOnce, in that
// order.
type Middleware func(Handler) Handler

// Chain returns h wrapped in mw, the first outermost: Chain(h, a, b) runs
// a, which runs b, which runs h.
func Chain(h Handler, mw ...Middleware) Handler {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}

// PanicError is a handler's panic, recovered by Recover: its message is
// what the attempt row records (no stack: it may be long), Stack what the
// worker logs. Its cause is labels.CausePanic.
type PanicError struct {
	Value any
	Stack []byte
}

func (p *PanicError) Error() string { return fmt.Sprintf("handler panic: %v", p.Value) }

// Recover turns a panic in next (or in the middleware inside it) into a
// *PanicError, wrapped with the cause labels.CausePanic, so the attempt is
// recorded like any other failure (retried, then failed) and the stack
// where it panicked is kept for the log.
func Recover(next Handler) Handler {
	return HandlerFunc(func(ctx context.Context, run Run) (res json.RawMessage, err error) {
		defer func() {
			if r := recover(); r != nil {
				res, err = nil, WithCause(&PanicError{Value: r, Stack: debug.Stack()}, labels.CausePanic)
			}
		}()
		return next.Handle(ctx, run)
	})
}
