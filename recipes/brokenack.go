//go:build concurrency_brokenack

package recipes

// A deliberately broken build, for the fault tests only
// (go test ./faults/ -run TestFaultsWorkQueue -faults.tags=concurrency_brokenack):
// a Delivery's Ack, AckTxn and Nack ignore whether the claim still holds,
// so that a consumer whose claim was lost acknowledges an item another
// consumer holds. Never build the library with this tag for use.
func init() { unguardedAck = true }
