package concurrency

import (
	"context"
	"errors"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// This file is the package's OpenTelemetry spans, recorded only for a
// session given WithTracerProvider (see instruments in metrics.go). The
// attributes are namespaced to this module (attrNS): "concurrency." alone is
// generic enough for another library's attributes on the same spans.
//
//   - concurrency.acquire, one per Lock, TryLock, Campaign, Acquire, RLock...
//     that reaches etcd, from the call to the hold or the error. Attributes:
//     kind, lock (the name), key, wait (false for a TryLock), token (the
//     key's create revision: the fencing token), queue.ahead (the keys
//     counted against this one when it was enqueued: 0 means it held at
//     once; absent when the key already existed), and at the end outcome:
//     acquired, locked (a TryLock miss), canceled (the caller's context
//     ended) or error. An event "wait" marks the start of a wait.
//   - concurrency.hold, one per acquisition that acquired, from the hold to
//     its end: a sibling of concurrency.acquire (a child of the caller's
//     span), with kind, lock, key, token, and at the end outcome, why the
//     hold ended: released, lost_key_deleted, lost_lease,
//     session_expired, max_hold, yielded or unhealthy (as the label cause
//     of the metrics).
//   - concurrency.release, one per Unlock, Release, RUnlock or Resign that
//     deletes a key, with kind, lock, key, token and outcome: released,
//     lost (the key was already gone), session_expired, or error (the hold
//     goes on).
//   - concurrency.lead.term, one per term of Lead: from the won campaign to
//     the return of fn, the parent of fn's spans (fn's context carries it),
//     with lock, token, and outcome: returned (fn returned nil as the
//     leader), error (fn returned an error as the leader), lost (the
//     leadership ended while fn ran) or canceled (Lead's context ended).

// tracerName is the instrumentation scope of the package's spans.
const tracerName = "github.com/seed-a9d410c6/concurrency"

// attrNS begins the name of every attribute: the module's owner and name,
// as OpenTelemetry asks of attributes outside its own conventions.
const attrNS = "seed_a9d410c6.concurrency."

var (
	attrKind    = attribute.Key(attrNS + "kind")
	attrLock    = attribute.Key(attrNS + "lock")
	attrKey     = attribute.Key(attrNS + "key")
	attrWait    = attribute.Key(attrNS + "wait")
	attrToken   = attribute.Key(attrNS + "token")
	attrAhead   = attribute.Key(attrNS + "queue.ahead")
	attrOutcome = attribute.Key(attrNS + "outcome")
)

func (a *acquisition) startSpan(ctx context.Context, key string, wait bool) context.Context {
	if a.i.tracer == nil {
		return ctx
	}
	a.parent = ctx
	ctx, a.span = a.i.tracer.Start(ctx, "concurrency.acquire", trace.WithAttributes(
		attrKind.String(a.kind), attrLock.String(a.name), attrKey.String(key), attrWait.Bool(wait)))
	return ctx
}

func (a *acquisition) spanEnqueued(token, ahead int64) {
	if a.span == nil {
		return
	}
	a.span.SetAttributes(attrToken.Int64(token))
	if ahead >= 0 {
		a.span.SetAttributes(attrAhead.Int64(ahead))
	}
}

func (a *acquisition) spanWait() {
	if a.span != nil {
		a.span.AddEvent("wait")
	}
}

func (a *acquisition) spanDone(token int64, err error) {
	if a.span == nil {
		return
	}
	defer a.span.End()
	switch {
	case err == nil:
		a.span.SetAttributes(attrOutcome.String("acquired"), attrToken.Int64(token))
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

// startRelease starts the span of the release of a hold of key, of a lock
// of kind, with fencing token token, or returns nil.
func (i *instruments) startRelease(ctx context.Context, kind, key string, token int64) trace.Span {
	if i == nil || i.tracer == nil {
		return nil
	}
	_, span := i.tracer.Start(ctx, "concurrency.release", trace.WithAttributes(
		attrKind.String(kind), attrLock.String(keyLockName(kind, key)), attrKey.String(key), attrToken.Int64(token)))
	return span
}

// keyLockName is the name of the lock of kind whose key is key: the key
// without its last part (a lease ID, or a lease ID and a number) and, for
// the two sides of an RWMutex, without "r/" or "w/" either.
func keyLockName(kind, key string) string {
	name := key[:max(strings.LastIndex(key, "/"), 0)]
	if kind == kindRead || kind == kindWrite {
		name = name[:max(strings.LastIndex(name, "/"), 0)]
	}
	return name
}

// startHoldSpan starts the span of the hold of key, with fencing token
// token, that the acquisition a acquired, as a child of the caller's
// span, or returns nil.
func (a *acquisition) startHoldSpan(key string, token int64) trace.Span {
	if a.i.tracer == nil {
		return nil
	}
	_, span := a.i.tracer.Start(a.parent, "concurrency.hold", trace.WithAttributes(
		attrKind.String(a.kind), attrLock.String(a.name), attrKey.String(key), attrToken.Int64(token)))
	return span
}

// endHoldSpan ends span, if not nil, with why the hold ended (causeLabel).
func endHoldSpan(span trace.Span, cause string) {
	if span == nil {
		return
	}
	span.SetAttributes(attrOutcome.String(cause))
	span.End()
}

// startTerm starts the span of a term of Lead that leads the election name
// with token rev; the returned context carries it, for fn. end ends it:
// lost says whether the leadership ended while fn ran, ctxErr is Lead's
// context's error and fnErr what fn returned. Without a tracer, ctx is
// returned and end does nothing.
func (i *instruments) startTerm(ctx context.Context, name string, rev int64) (_ context.Context, end func(lost bool, ctxErr, fnErr error)) {
	if i == nil || i.tracer == nil {
		return ctx, func(bool, error, error) {}
	}
	ctx, span := i.tracer.Start(ctx, "concurrency.lead.term", trace.WithAttributes(
		attrLock.String(name), attrToken.Int64(rev)))
	return ctx, func(lost bool, ctxErr, fnErr error) {
		defer span.End()
		switch {
		case lost:
			span.SetAttributes(attrOutcome.String("lost"))
		case ctxErr != nil:
			span.SetAttributes(attrOutcome.String("canceled"))
		case fnErr != nil:
			span.SetAttributes(attrOutcome.String("error"))
			span.RecordError(fnErr)
			span.SetStatus(codes.Error, fnErr.Error())
		default:
			span.SetAttributes(attrOutcome.String("returned"))
		}
	}
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
