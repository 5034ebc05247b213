package concurrency_test

import (
	"testing"
	"time"

	"github.com/seed-a9d410c6/concurrency"
)

// Close revokes the session's lease, which deletes its keys, and ends the
// session.
func TestSessionCloseRevokes(t *testing.T) {
	c := newClient(t)
	pfx := "/test/" + t.Name() + "/"
	s, err := concurrency.NewSession(c, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	if err := concurrency.NewMutex(s, pfx).Lock(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	ttl, err := c.TimeToLive(testContext(t), s.Lease())
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL != -1 {
		t.Fatalf("lease TTL %d after Close, want -1 (revoked)", ttl.TTL)
	}
	if n := keys(t, c, pfx); n != 0 {
		t.Fatalf("%d keys after Close, want 0", n)
	}
}

// A lease revoked by someone else ends the session: Done closes.
func TestSessionRevokedOutside(t *testing.T) {
	c := newClient(t)
	s := newSession(t, c)
	if _, err := c.Revoke(testContext(t), s.Lease()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("session still alive 15 s after its lease was revoked")
	}
}
