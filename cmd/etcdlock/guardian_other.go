//go:build !linux

package main

import (
	"os"
	"syscall"
)

// setDeathSignal does nothing: this system has no parent-death signal. The
// guardian's poll of its parent (guardianPoll) kills the command's group
// once etcdlock is gone; a foreground command is not killed.
func setDeathSignal(*syscall.SysProcAttr, syscall.Signal) {}

// selfExe is the path that runs etcdlock again as its guardian.
func selfExe() string {
	if p, err := os.Executable(); err == nil {
		return p
	}
	return os.Args[0]
}
