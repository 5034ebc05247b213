package concurrency

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
	etcdconc "go.etcd.io/etcd/client/v3/concurrency"
)

// The software transactional memory (STM) half of etcd's package is
// exposed here unchanged, so that a program that uses it compiles and
// behaves the same after swapping the import path. etcd's STM has no known
// bug to fix and shares no keys or queues with Mutex and Election, so every
// name below is etcd's own (a type alias or a call straight into
// go.etcd.io/etcd/client/v3/concurrency), not a copy: a value of one
// package's type is a value of the other's. The one exception is
// STMOption: etcd exports its option type only from v3.7 (before, With...
// returned an unexported type), so this package has its own option type,
// which NewSTM turns into etcd's options on every supported etcd line.

// STM is etcd's concurrency.STM: the reads and writes of one software
// transaction, passed to the apply function of NewSTM. Get reads a key and
// records it in the transaction's read set (a failed Get aborts the
// transaction); Put and Del buffer writes until the commit; Rev returns the
// modification revision of a key that was read. Its unexported methods mean
// that only etcd's package can implement it.
type STM = etcdconc.STM

// STMOption configures NewSTM: WithIsolation, WithAbortContext and
// WithPrefetch. It has the shape of etcd v3.7's concurrency.STMOption but is
// this package's own type, because etcd v3.5 and v3.6 do not export theirs;
// NewSTM hands each option to etcd as etcd's own, in the order given.
type STMOption func(*stmOptions)

// stmOptions records the options given to NewSTM, to be replayed as etcd's.
type stmOptions struct {
	iso      Isolation
	isoSet   bool
	ctx      context.Context
	ctxSet   bool // else the client's context, as in etcd's package
	prefetch []string
}

// Isolation is etcd's concurrency.Isolation: how a transaction's reads see
// other transactions' writes, and which conflicts make it retry.
type Isolation = etcdconc.Isolation

// The isolation levels of etcd's package, with its values.
const (
	// SerializableSnapshot is etcd's concurrency.SerializableSnapshot, the
	// default: reads are from the revision of the first read, and the
	// transaction also retries if a key it writes changed after that
	// revision.
	SerializableSnapshot = etcdconc.SerializableSnapshot
	// Serializable is etcd's concurrency.Serializable: reads within one
	// attempt return data from the revision of the first read.
	Serializable = etcdconc.Serializable
	// RepeatableReads is etcd's concurrency.RepeatableReads: reads within
	// one attempt always return the same data.
	RepeatableReads = etcdconc.RepeatableReads
	// ReadCommitted is etcd's concurrency.ReadCommitted: reads see any
	// committed revision, and the transaction never retries for a conflict.
	ReadCommitted = etcdconc.ReadCommitted
)

// NewSTM is etcd's concurrency.NewSTM. It runs apply in a software
// transaction and commits apply's writes in one etcd transaction if nothing
// it read has changed, as the isolation level (default
// SerializableSnapshot) defines a change; otherwise it runs apply again,
// until a commit succeeds. It blocks for the round trips of every attempt.
// If apply returns an error, NewSTM returns it and writes nothing. A failed
// read or commit, such as the end of the context given with
// WithAbortContext (default: the client's), ends it with that error.
func NewSTM(c *clientv3.Client, apply func(STM) error, so ...STMOption) (*clientv3.TxnResponse, error) {
	var o stmOptions
	for _, opt := range so {
		opt(&o)
	}
	// etcd's option type cannot be named before v3.7, so the slice of
	// etcd's options takes its type from the first one. WithPrefetch with
	// no keys adds nothing, as in etcd's package; a later option of the
	// same kind overrides an earlier one, as in etcd's package.
	opts := etcdOptions(etcdconc.WithPrefetch(o.prefetch...))
	if o.isoSet {
		opts = append(opts, etcdconc.WithIsolation(o.iso))
	}
	if o.ctxSet {
		opts = append(opts, etcdconc.WithAbortContext(o.ctx))
	}
	return etcdconc.NewSTM(c, apply, opts...)
}

// etcdOptions returns its arguments as a slice whose element type is
// inferred: etcd's unexported STM option type before v3.7.
func etcdOptions[T any](opts ...T) []T { return opts }

// NewSTMRepeatable is etcd's concurrency.NewSTMRepeatable, which etcd
// documents as deprecated: NewSTM with WithAbortContext(ctx) and
// WithIsolation(RepeatableReads).
func NewSTMRepeatable(ctx context.Context, c *clientv3.Client, apply func(STM) error) (*clientv3.TxnResponse, error) {
	return etcdconc.NewSTMRepeatable(ctx, c, apply)
}

// NewSTMSerializable is etcd's concurrency.NewSTMSerializable, which etcd
// documents as deprecated: NewSTM with WithAbortContext(ctx) and
// WithIsolation(Serializable).
func NewSTMSerializable(ctx context.Context, c *clientv3.Client, apply func(STM) error) (*clientv3.TxnResponse, error) {
	return etcdconc.NewSTMSerializable(ctx, c, apply)
}

// NewSTMReadCommitted is etcd's concurrency.NewSTMReadCommitted, which etcd
// documents as deprecated: NewSTM with WithAbortContext(ctx) and
// WithIsolation(ReadCommitted).
func NewSTMReadCommitted(ctx context.Context, c *clientv3.Client, apply func(STM) error) (*clientv3.TxnResponse, error) {
	return etcdconc.NewSTMReadCommitted(ctx, c, apply)
}

// WithIsolation is etcd's concurrency.WithIsolation: the transaction's
// isolation level (default SerializableSnapshot). The last one given wins.
func WithIsolation(lvl Isolation) STMOption {
	return func(o *stmOptions) { o.iso, o.isoSet = lvl, true }
}

// WithAbortContext is etcd's concurrency.WithAbortContext: the context
// whose end aborts the transaction for good (default: the client's). The
// last one given wins.
func WithAbortContext(ctx context.Context) STMOption {
	return func(o *stmOptions) { o.ctx, o.ctxSet = ctx, true }
}

// WithPrefetch is etcd's concurrency.WithPrefetch: keys that every attempt
// reads before apply runs, in one round trip rather than one Get each.
// Keys of several WithPrefetch options add up.
func WithPrefetch(keys ...string) STMOption {
	return func(o *stmOptions) { o.prefetch = append(o.prefetch, keys...) }
}
