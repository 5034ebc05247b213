//go:build !race

package faults_test

const raceEnabled = false
