package concurrency

import (
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file holds the layout of a lock name's keys, which every primitive
// shares: a name's prefix, and the key of a session's lease under it.

// prefix turns a lock or election name into the prefix of its keys, as
// etcd's package does: the name followed by "/", even if it ends in "/".
func prefix(name string) string { return name + "/" }

// prefixedKey returns prefix(name) and the key that lease id uses under
// it, in one allocation: the prefix is the start of the key.
func prefixedKey(name string, id clientv3.LeaseID) (pfx, key string) {
	key = fmt.Sprintf("%s/%x", name, int64(id))
	return key[:len(name)+1], key
}

// leaseKey is the key that session lease id uses under prefix pfx.
func leaseKey(pfx string, id clientv3.LeaseID) string { return fmt.Sprintf("%s%x", pfx, int64(id)) }

// lockName is the name of the lock whose keys are under pfx.
func lockName(pfx string) string { return strings.TrimSuffix(pfx, "/") }
