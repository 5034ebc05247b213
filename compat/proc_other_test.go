//go:build !linux

package compat

import "os/exec"

func setProcAttr(*exec.Cmd) {}
