//go:build race

package concurrency_test

// raceEnabled tells tests that read state of etcd's Mutex while another
// goroutine uses it (a data race in etcd's package, which this package
// fixes) to run those parts only without the race detector.
const raceEnabled = true
