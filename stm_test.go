package concurrency

import (
	"context"
	"slices"
	"testing"
)

// The STM options record what NewSTM hands to etcd as etcd's own options:
// the last isolation and abort context win, prefetched keys add up, and
// nothing given means etcd's defaults. (NewSTM itself runs against real
// servers of every etcd line in compat/ and on embedded clusters in tests/.)
func TestSTMOptionsRecord(t *testing.T) {
	ctx1, ctx2 := context.Background(), context.TODO()
	tests := []struct {
		name string
		opts []STMOption
		want stmOptions
	}{
		{"none", nil, stmOptions{}},
		{"isolation, last wins", []STMOption{WithIsolation(ReadCommitted), WithIsolation(Serializable)},
			stmOptions{iso: Serializable, isoSet: true}},
		{"default isolation given", []STMOption{WithIsolation(SerializableSnapshot)},
			stmOptions{iso: SerializableSnapshot, isoSet: true}},
		{"abort context, last wins", []STMOption{WithAbortContext(ctx1), WithAbortContext(ctx2)},
			stmOptions{ctx: ctx2, ctxSet: true}},
		{"prefetch adds up", []STMOption{WithPrefetch("a", "b"), WithPrefetch(), WithPrefetch("c")},
			stmOptions{prefetch: []string{"a", "b", "c"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got stmOptions
			for _, o := range tc.opts {
				o(&got)
			}
			if got.iso != tc.want.iso || got.isoSet != tc.want.isoSet || got.ctx != tc.want.ctx ||
				got.ctxSet != tc.want.ctxSet || !slices.Equal(got.prefetch, tc.want.prefetch) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
