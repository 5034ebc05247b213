//go:build !unix

package concurrency_test

import "time"

// processCPU returns -1: the CPU time a process used is read on Unix only.
func processCPU() time.Duration { return -1 }
