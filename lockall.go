package concurrency

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
)

// LockAll locks every Mutex of ms, or none: it locks them one at a time in
// one global order (by lock name), so that processes that lock overlapping
// sets in any order cannot deadlock, and if one Lock fails (ctx ends, the
// session ends) it unlocks those it took, with a fresh context bounded like
// Do's, and returns that Lock's error, joined with any Unlock's. A Mutex
// given twice is locked once; two Mutexes of one name (ErrDuplicateName),
// a nil Mutex, or bad input on any (ErrNilSession, ErrInvalidPrefix) are
// reported before anything is locked.
func LockAll(ctx context.Context, ms ...*Mutex) error {
	order, err := lockOrder(ms)
	if err != nil {
		return err
	}
	for i, m := range order {
		if err := m.Lock(ctx); err != nil {
			return errors.Join(err, unlockAll(ctx, order[:i]))
		}
	}
	return nil
}

// UnlockAll unlocks every Mutex of ms that is held, in the reverse of
// LockAll's order, and returns the errors of those that failed, joined.
// Each Unlock retries while etcd is unreachable until ctx ends; a Mutex
// whose Unlock failed stays held and can be unlocked again.
func UnlockAll(ctx context.Context, ms ...*Mutex) error {
	order, err := lockOrder(ms)
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range slices.Backward(order) {
		if err := m.Unlock(ctx); err != nil && !errors.Is(err, ErrLockReleased) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// unlockAll undoes a LockAll that failed after taking locked.
func unlockAll(ctx context.Context, locked []*Mutex) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	return UnlockAll(ctx, locked...)
}

// lockOrder sorts ms by key, checks them, and drops repeated values.
func lockOrder(ms []*Mutex) ([]*Mutex, error) {
	order := make([]*Mutex, 0, len(ms))
	for i, m := range ms {
		if m == nil {
			return nil, fmt.Errorf("%w: mutex %d is nil", ErrNilSession, i)
		}
		if err := validate(m.s, m.pfx); err != nil {
			return nil, fmt.Errorf("mutex %d: %w", i, err)
		}
		if slices.Contains(order, m) {
			continue
		}
		if j := slices.IndexFunc(order, func(o *Mutex) bool { return o.pfx == m.pfx }); j >= 0 {
			return nil, fmt.Errorf("%w: %q given as two Mutexes", ErrDuplicateName, m.pfx[:len(m.pfx)-1])
		}
		order = append(order, m)
	}
	// By name, not by key: a key's lease part would order names differently
	// in different sessions.
	slices.SortStableFunc(order, func(a, b *Mutex) int { return cmp.Compare(a.pfx, b.pfx) })
	return order, nil
}
