package compare

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	upstream "go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/seed-a9d410c6/concurrency"
)

// The systems compared. Each name is a lock library on its servers.
const (
	This      = "this"      // this module's Mutex on a 3-member etcd cluster
	Etcd      = "etcd"      // etcd's client/v3/concurrency Mutex on the same kind of cluster
	RedisLock = "redislock" // bsm/redislock on a Redis master with one replica
	Redsync3  = "redsync3"  // go-redsync Redlock on 3 independent Redis servers
	Redsync5  = "redsync5"  // go-redsync Redlock on 5 independent Redis servers
	ZooKeeper = "zk"        // go-zookeeper's lock recipe on a 3-server ensemble
)

// Systems lists every system in table order.
var Systems = []string{This, Etcd, RedisLock, Redsync3, Redsync5, ZooKeeper}

// Config says how a client reaches one system.
type Config struct {
	System string
	Addrs  []string      // host:port of the servers (or of proxies before them)
	TTL    time.Duration // lease, key expiry or session timeout
	// Retry is the polling interval of the Redis locks, which have no
	// wait-for-release notification; ignored by the others.
	Retry time.Duration
	// Token makes the ZooKeeper lock look up its node's czxid after each
	// acquisition (two more reads); the others have it or have none.
	Token bool
}

// Lock is one lock client of one system: with its own session (etcd),
// connection and session (ZooKeeper) or lock value (Redis).
type Lock interface {
	// Acquire blocks until the lock is held or ctx ends.
	Acquire(ctx context.Context) error
	// Token is the fencing token of the current hold, 0 if the system
	// has none.
	Token() int64
	// Release gives the lock up.
	Release(ctx context.Context) error
	// Close ends the lock client's session (etcd, ZooKeeper) without
	// waiting for the servers; the lock client is then spent.
	Close()
}

// Client makes locks of one system on one shared connection where the
// system allows it.
type Client struct {
	cfg   Config
	etcd  *clientv3.Client
	redis []*redis.Client
	rs    *redsync.Redsync
	rl    *redislock.Client
	zks   []*zk.Conn
}

// Dial connects to a system.
func Dial(cfg Config) (*Client, error) {
	c := &Client{cfg: cfg}
	switch cfg.System {
	case This, Etcd:
		var eps []string
		for _, a := range cfg.Addrs {
			eps = append(eps, "http://"+a)
		}
		cli, err := clientv3.New(clientv3.Config{
			Endpoints: eps, DialTimeout: 2 * time.Second,
			DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second,
			Logger: zap.NewNop(),
		})
		if err != nil {
			return nil, err
		}
		c.etcd = cli
	case RedisLock, Redsync3, Redsync5:
		var pools []redsyncredis.Pool
		for _, a := range cfg.Addrs {
			rc := redis.NewClient(&redis.Options{
				Addr: a, DialTimeout: 500 * time.Millisecond,
				ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
				MaxRetries: -1, PoolSize: 64,
			})
			c.redis = append(c.redis, rc)
			pools = append(pools, goredis.NewPool(rc))
		}
		if cfg.System == RedisLock {
			c.rl = redislock.New(c.redis[0])
		} else {
			c.rs = redsync.New(pools...)
		}
	case ZooKeeper:
	default:
		return nil, fmt.Errorf("compare: unknown system %q", cfg.System)
	}
	return c, nil
}

// Etcd is the etcd client, for the etcd systems.
func (c *Client) Etcd() *clientv3.Client { return c.etcd }

// Close closes the client's connections and every ZooKeeper session.
func (c *Client) Close() {
	if c.etcd != nil {
		c.etcd.Close()
	}
	for _, r := range c.redis {
		r.Close()
	}
	for _, z := range c.zks {
		z.Close()
	}
}

// NewLock returns a lock client for name. For etcd it opens a session
// that ends with ctx, for ZooKeeper a connection with its own session.
func (c *Client) NewLock(ctx context.Context, name string) (Lock, error) {
	ttl := c.cfg.TTL
	switch c.cfg.System {
	case This:
		s, err := concurrency.NewSession(c.etcd, concurrency.WithTTL(int(math.Ceil(ttl.Seconds()))), concurrency.WithContext(ctx))
		if err != nil {
			return nil, err
		}
		return &ThisLock{s: s, M: concurrency.NewMutex(s, "/compare/"+name)}, nil
	case Etcd:
		s, err := upstream.NewSession(c.etcd, upstream.WithTTL(int(math.Ceil(ttl.Seconds()))), upstream.WithContext(ctx))
		if err != nil {
			return nil, err
		}
		return &etcdLock{s: s, m: upstream.NewMutex(s, "/compare/"+name)}, nil
	case RedisLock:
		return &redisLock{c: c.rl, key: "compare:" + name, ttl: ttl, retry: c.cfg.Retry}, nil
	case Redsync3, Redsync5:
		m := c.rs.NewMutex("compare:"+name, redsync.WithExpiry(ttl), redsync.WithTries(math.MaxInt32),
			redsync.WithRetryDelay(c.cfg.Retry))
		return &redsyncLock{m: m}, nil
	case ZooKeeper:
		conn, _, err := zk.Connect(c.cfg.Addrs, ttl, zk.WithLogger(nopLogger{}))
		if err != nil {
			return nil, err
		}
		c.zks = append(c.zks, conn)
		return &zkLock{conn: conn, path: "/compare/" + name, token: c.cfg.Token}, nil
	}
	return nil, fmt.Errorf("compare: unknown system %q", c.cfg.System)
}

// ThisLock is this module's Mutex with its session; M gives the worker
// Txn for the guarded counter.
type ThisLock struct {
	s *concurrency.Session
	M *concurrency.Mutex
}

func (l *ThisLock) Acquire(ctx context.Context) error { return l.M.Lock(ctx) }
func (l *ThisLock) Token() int64                      { return l.M.Token() }
func (l *ThisLock) Release(ctx context.Context) error { return l.M.Unlock(ctx) }

func (l *ThisLock) Close() { go l.s.Close() }

type etcdLock struct {
	s *upstream.Session
	m *upstream.Mutex
}

func (l *etcdLock) Acquire(ctx context.Context) error { return l.m.Lock(ctx) }
func (l *etcdLock) Token() int64                      { return 0 }
func (l *etcdLock) Release(ctx context.Context) error { return l.m.Unlock(ctx) }
func (l *etcdLock) Close()                            { go l.s.Close() }

type redisLock struct {
	c     *redislock.Client
	key   string
	ttl   time.Duration
	retry time.Duration
	held  *redislock.Lock
}

func (l *redisLock) Acquire(ctx context.Context) error {
	lk, err := l.c.Obtain(ctx, l.key, l.ttl, &redislock.Options{RetryStrategy: redislock.LinearBackoff(l.retry)})
	if err != nil {
		if ctx.Err() != nil {
			return errors.Join(err, ctx.Err())
		}
		return err
	}
	l.held = lk
	return nil
}

func (l *redisLock) Token() int64 { return 0 }
func (l *redisLock) Close()       {}

func (l *redisLock) Release(ctx context.Context) error {
	if l.held == nil {
		return errors.New("compare: not held")
	}
	lk := l.held
	l.held = nil
	return lk.Release(ctx)
}

type redsyncLock struct{ m *redsync.Mutex }

func (l *redsyncLock) Acquire(ctx context.Context) error {
	err := l.m.LockContext(ctx)
	if err != nil && ctx.Err() != nil {
		return errors.Join(err, ctx.Err())
	}
	return err
}
func (l *redsyncLock) Token() int64 { return 0 }
func (l *redsyncLock) Close()       {}
func (l *redsyncLock) Release(ctx context.Context) error {
	ok, err := l.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("compare: redsync unlock on no quorum")
	}
	return err
}

// zkLock is go-zookeeper's recipe. Its Lock has no context, so Acquire
// runs it aside and, when ctx ends first, closes the connection (which
// ends the session and so the wait); the lock client is then spent.
type zkLock struct {
	conn  *zk.Conn
	path  string
	lk    *zk.Lock
	token bool
	czxid int64
}

func (l *zkLock) Acquire(ctx context.Context) error {
	if l.lk == nil {
		l.lk = zk.NewLock(l.conn, l.path, zk.WorldACL(zk.PermAll))
	}
	done := make(chan error, 1)
	go func() { done <- l.lk.Lock() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		l.conn.Close()
		<-done
		return ctx.Err()
	}
	if err != nil {
		l.lk = nil // a failed recipe may have left its state; start afresh
		return err
	}
	l.czxid = 0
	if l.token {
		l.czxid, err = l.ownCzxid()
		if err != nil {
			l.lk.Unlock()
			l.lk = nil
			return fmt.Errorf("compare: zk token: %w", err)
		}
	}
	return nil
}

// ownCzxid finds the lock node that this session owns (the recipe keeps
// its path unexported) and returns its czxid, which grows from holder to
// holder as the sequence numbers do.
func (l *zkLock) ownCzxid() (int64, error) {
	kids, _, err := l.conn.Children(l.path)
	if err != nil {
		return 0, err
	}
	sid := l.conn.SessionID()
	for _, k := range kids {
		ok, st, err := l.conn.Exists(l.path + "/" + k)
		if err != nil {
			return 0, err
		}
		if ok && st.EphemeralOwner == sid {
			return st.Czxid, nil
		}
	}
	return 0, errors.New("own lock node not found")
}

func (l *zkLock) Token() int64 { return l.czxid }
func (l *zkLock) Close()       { go l.conn.Close() }

func (l *zkLock) Release(ctx context.Context) error {
	if l.lk == nil {
		return errors.New("compare: not held")
	}
	done := make(chan error, 1)
	lk := l.lk
	go func() { done <- lk.Unlock() }()
	select {
	case err := <-done:
		if err != nil {
			l.lk = nil // the node is gone or unknown: a new recipe object
		}
		return err
	case <-ctx.Done():
		l.lk = nil
		return ctx.Err()
	}
}
