//go:build concurrency_brokenjudge

package concurrency

// A deliberately broken build, for the fault tests only
// (go test ./faults/ -faults.tags=concurrency_brokenjudge): judge ignores
// the older keys it read, so that locks are granted to every waiter at
// once. Never build the library with this tag for use.
func init() { skipJudge = true }
