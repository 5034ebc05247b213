package main

import "syscall"

// setDeathSignal has the kernel send sig to the child once its parent's
// starting thread exits (startLocked keeps that thread for the life of the
// process).
func setDeathSignal(attr *syscall.SysProcAttr, sig syscall.Signal) { attr.Pdeathsig = sig }

// selfExe is the path that runs etcdlock again as its guardian: the
// running binary itself, even if its file was replaced or removed since.
func selfExe() string { return "/proc/self/exe" }
