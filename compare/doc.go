// Package compare runs this module's locks side by side with etcd's
// package, Redis locks (bsm/redislock on a master with a replica, and
// go-redsync's Redlock on 3 and on 5 independent servers) and ZooKeeper's
// lock recipe (go-zookeeper/zk on a 3-server ensemble), on real server
// processes on 127.0.0.1 (issue 16); and, with -queues, recipes.WorkQueue
// beside etcd's recipe Queue and the Redis reliable-queue pattern
// (queues.go, issue 53).
//
// It is its own Go module so that users of the library never download a
// Redis or ZooKeeper client. The package holds the harness: server
// processes (servers.go), a loopback TCP proxy that cuts one client off
// (proxy.go), the protected store that counts lost updates and overlapping
// holds (store.go), one lock interface over every system (systems.go), the
// speed workloads (speed.go) and the fault runs (safety.go). Client
// processes for the fault runs are the worker command; cmd/compare prints
// the tables of COMPARISON.md.
//
//	sh compare/setup.sh                     # Debian's redis-server and zookeeper
//	cd compare && go test -short ./...      # a smoke run, one workload per system
//	cd compare && go run ./cmd/compare -full
//	cd compare && go run ./cmd/compare -queues
package compare
