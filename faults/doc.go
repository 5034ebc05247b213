// Package faults holds the fault-injection tests of this module (issue 6):
// real etcd server processes, client processes running lock and election
// workloads, a nemesis that kills, pauses, partitions and restarts them, and
// a checker over the recorded histories (internal/historycheck). Run it with
//
//	sh faults/setup.sh   # once: Debian's etcd 3.4 for TestOldServer
//	go test ./faults/...
//
// and a soak with -faults.duration=10m. RELIABILITY.md explains the
// workloads, faults and invariants, and records the soak's figures.
package faults
