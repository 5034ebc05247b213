//go:build !race

package concurrency_test

const raceEnabled = false
