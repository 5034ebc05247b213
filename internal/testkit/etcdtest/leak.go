package etcdtest

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// ownFrames mark a goroutine as the test's own business: this module's
// code, etcd's client, and gRPC client connections. Server goroutines of
// the shared cluster never run these.
var ownFrames = []string{
	"github.com/seed-a9d410c6/concurrency",
	"go.etcd.io/etcd/client/v3.",
	"go.etcd.io/etcd/client/v3/concurrency.",
	"google.golang.org/grpc.(*ClientConn)",
	"google.golang.org/grpc.(*addrConn)",
	"google.golang.org/grpc/internal/transport.(*http2Client)",
}

// CheckLeaks fails the test if, 15 seconds after it ends, a goroutine that
// was not running when CheckLeaks was called still runs client code. A
// leak lasts for ever; 15 s, not 5, because gRPC closes a transport that a
// closed client was still dialing (a reconnect after a leader change) only
// once the dial returns, from the dialing goroutine (addrConn's
// createTransport), and the transport's reader runs meanwhile: on a
// machine at load 37 one still waited on its connection 5 s after the test
// ended (a CI run of TestMaxHoldInvalid). A test without such goroutines
// waits for none.
func CheckLeaks(t testing.TB) {
	t.Helper()
	before := goroutines()
	t.Cleanup(func() {
		if t.Failed() {
			return // the leak would hide the real failure
		}
		var leaked []string
		deadline := time.Now().Add(15 * time.Second)
		for {
			leaked = leaked[:0]
			for id, stack := range goroutines() {
				if _, ok := before[id]; !ok && isOwn(stack) {
					leaked = append(leaked, stack)
				}
			}
			if len(leaked) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if len(leaked) > 0 {
			t.Errorf("etcdtest: %d goroutines leaked:\n\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
	})
}

func isOwn(stack string) bool {
	// The checking goroutine itself runs in this package.
	if strings.Contains(stack, "etcdtest.CheckLeaks") || strings.Contains(stack, "etcdtest.goroutines") {
		return false
	}
	for _, f := range ownFrames {
		if strings.Contains(stack, f) {
			return true
		}
	}
	return false
}

// goroutines returns the stacks of all goroutines by goroutine ID.
func goroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	m := make(map[string]string)
	for _, g := range strings.Split(string(buf), "\n\n") {
		// "goroutine 42 [running]:"
		f := strings.Fields(g)
		if len(f) >= 2 && f[0] == "goroutine" {
			m[f[1]] = g
		}
	}
	return m
}
