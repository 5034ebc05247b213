//go:build race

package faults_test

// raceEnabled builds the worker with -race when the tests run with it.
const raceEnabled = true
