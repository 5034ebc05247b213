package concurrency

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// This file is the package's OpenTelemetry spans, recorded only for a
// session given WithTracerProvider (see instruments in metrics.go):
//
//   - concurrency.acquire, one per Lock, TryLock, Campaign, Acquire, RLock...
//     that reaches etcd, from the call to the hold or the error. Attributes:
//     concurrency.kind, concurrency.lock (the name), concurrency.key,
//     concurrency.wait (false for a TryLock), concurrency.token (the key's
//     create revision: the fencing token), concurrency.queue.ahead (the
//     keys counted against this one when it was enqueued: 0 means it held
//     at once; absent when the key already existed), and at the end
//     concurrency.outcome: acquired, locked (a TryLock miss), canceled
//     (the caller's context ended) or error. An event "wait" marks the
//     start of a wait.
//   - concurrency.release, one per Unlock, Release, RUnlock or Resign that
//     deletes a key, with concurrency.kind, concurrency.key,
//     concurrency.token and concurrency.outcome: released, lost (the key
//     was already gone), session_expired, or error (the hold goes on).

// tracerName is the instrumentation scope of the package's spans.
const tracerName = "github.com/seed-a9d410c6/concurrency"

var (
	attrKind    = attribute.Key("concurrency.kind")
	attrLock    = attribute.Key("concurrency.lock")
	attrKey     = attribute.Key("concurrency.key")
	attrWait    = attribute.Key("concurrency.wait")
	attrToken   = attribute.Key("concurrency.token")
	attrAhead   = attribute.Key("concurrency.queue.ahead")
	attrOutcome = attribute.Key("concurrency.outcome")
)

func (a *acquisition) startSpan(ctx context.Context, key string, wait bool) context.Context {
	if a.i.tracer == nil {
		return ctx
	}
	ctx, a.span = a.i.tracer.Start(ctx, "concurrency.acquire", trace.WithAttributes(
		attrKind.String(a.kind), attrLock.String(a.name), attrKey.String(key), attrWait.Bool(wait)))
	return ctx
}

func (a *acquisition) spanEnqueued(q queued) {
	if a.span == nil {
		return
	}
	a.span.SetAttributes(attrToken.Int64(q.rev))
	if q.ahead >= 0 {
		a.span.SetAttributes(attrAhead.Int64(q.ahead))
	}
}

func (a *acquisition) spanWait() {
	if a.span != nil {
		a.span.AddEvent("wait")
	}
}

func (a *acquisition) spanDone(h *hold, err error) {
	if a.span == nil {
		return
	}
	defer a.span.End()
	switch {
	case err == nil:
		a.span.SetAttributes(attrOutcome.String("acquired"), attrToken.Int64(h.rev))
	case errors.Is(err, ErrLocked):
		a.span.SetAttributes(attrOutcome.String("locked"))
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		a.span.SetAttributes(attrOutcome.String("canceled"))
	default:
		a.span.SetAttributes(attrOutcome.String("error"))
		a.span.RecordError(err)
		a.span.SetStatus(codes.Error, err.Error())
	}
}

// startRelease starts the span of h's release, or returns nil.
func (i *instruments) startRelease(ctx context.Context, h *hold) trace.Span {
	if i == nil || i.tracer == nil {
		return nil
	}
	_, span := i.tracer.Start(ctx, "concurrency.release", trace.WithAttributes(
		attrKind.String(h.kind), attrKey.String(h.key), attrToken.Int64(h.rev)))
	return span
}

// endRelease ends span, if not nil, with the outcome of a release.
func endRelease(span trace.Span, ended bool, err error, cause error) {
	if span == nil {
		return
	}
	defer span.End()
	switch {
	case !ended:
		span.SetAttributes(attrOutcome.String("error"))
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	case errors.Is(cause, ErrLockReleased):
		span.SetAttributes(attrOutcome.String("released"))
	case errors.Is(cause, ErrLockLost):
		span.SetAttributes(attrOutcome.String("lost"))
	default:
		span.SetAttributes(attrOutcome.String("session_expired"))
	}
}
