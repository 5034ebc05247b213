package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

const connHelp = `Connection flags (before or after the command) can also be set through
environment variables with the names etcdctl uses, so that one environment
serves both tools; a flag on the command line wins over its variable:
  --endpoints                 ETCDCTL_ENDPOINTS   (comma-separated)
  --dial-timeout              ETCDCTL_DIAL_TIMEOUT
  --command-timeout           ETCDCTL_COMMAND_TIMEOUT
  --cacert                    ETCDCTL_CACERT
  --cert                      ETCDCTL_CERT
  --key                       ETCDCTL_KEY
  --insecure-skip-tls-verify  ETCDCTL_INSECURE_SKIP_TLS_VERIFY
  --user                      ETCDCTL_USER        (NAME or NAME:PASSWORD)
  --password                  ETCDCTL_PASSWORD
  --auth-jwt-token            ETCDCTL_AUTH_JWT_TOKEN  (instead of --user)
  --insecure-transport        ETCDCTL_INSECURE_TRANSPORT  (default true)
  --keepalive-time            ETCDCTL_KEEPALIVE_TIME      (default 10s)
  --keepalive-timeout         ETCDCTL_KEEPALIVE_TIMEOUT   (default 5s)
  --max-request-bytes         ETCDCTL_MAX_REQUEST_BYTES
  --max-recv-bytes            ETCDCTL_MAX_RECV_BYTES
TLS is used for endpoints given as https://, and for endpoints without a
scheme when any TLS flag is set or --insecure-transport=false (then with
the system's roots unless --cacert); http:// endpoints never use TLS.
The keepalive defaults are etcdlock's, not etcdctl's 2s and 6s: etcd closes
connections that ping more often than every 5 s (--grpc-keepalive-min-time),
and a lock is held for long.

Left out of etcdctl's global flags: DNS discovery (--discovery-srv, -d,
--discovery-srv-name, --insecure-discovery): a lock's endpoints should not
change with a DNS answer, and it cannot be tested here; resolve the SRV
records yourself and pass --endpoints. etcdlock refuses --discovery-srv
(exit 2) rather than lock on another cluster than meant; the other two
are accepted and, without it, mean nothing, as in etcdctl. --debug,
--write-out (-w) and --hex are output options of etcdctl's commands, not
connection flags ('inspect --json' is etcdlock's).`

// envPrefix is etcdctl's: ETCDCTL_ plus the flag name in upper case with
// "-" as "_".
const envPrefix = "ETCDCTL_"

// connFlags are the flags that say how to reach etcd.
type connFlags struct {
	endpoints          []string
	dialTimeout        time.Duration
	commandTimeout     time.Duration
	cacert, cert, key  string
	insecureSkipVerify bool
	insecureTransport  bool // false: TLS for endpoints without a scheme
	user, password     string
	jwtToken           string
	keepAliveTime      time.Duration
	keepAliveTimeout   time.Duration
	maxRequestBytes    int
	maxRecvBytes       int
	discoverySRV       string         // refused: see connHelp
	discoverySRVName   string         // accepted, unused without discoverySRV
	insecureDiscovery  bool           // accepted, unused without discoverySRV
	fs                 *pflag.FlagSet // where they were registered

	// quiet is --quiet (-q), which is not about the connection but, like
	// the connection flags, may come before or after the command. It has
	// no environment variable.
	quiet bool
}

func (c *connFlags) register(fs *pflag.FlagSet) {
	c.fs = fs
	fs.StringSliceVar(&c.endpoints, "endpoints", []string{"127.0.0.1:2379"}, "etcd endpoints, comma-separated")
	fs.DurationVar(&c.dialTimeout, "dial-timeout", 2*time.Second, "how long to wait for etcd's first answer (connection, TLS, authentication)")
	fs.DurationVar(&c.commandTimeout, "command-timeout", 5*time.Second, "how long each later request may take (not the wait for a lock)")
	fs.StringVar(&c.cacert, "cacert", "", "verify the servers' certificates with this CA bundle")
	fs.StringVar(&c.cert, "cert", "", "client certificate for TLS")
	fs.StringVar(&c.key, "key", "", "client key for TLS")
	fs.BoolVar(&c.insecureSkipVerify, "insecure-skip-tls-verify", false, "use TLS without verifying the servers' certificates (testing only)")
	fs.StringVar(&c.user, "user", "", "user name, or NAME:PASSWORD")
	fs.StringVar(&c.password, "password", "", "password of --user")
	fs.StringVar(&c.jwtToken, "auth-jwt-token", "", "JWT token for authentication, instead of --user and --password")
	fs.BoolVar(&c.insecureTransport, "insecure-transport", true, "no TLS for endpoints without a scheme unless a TLS flag is set; false: always TLS (https:// endpoints use TLS either way)")
	fs.DurationVar(&c.keepAliveTime, "keepalive-time", 10*time.Second, "ping a connection idle this long, to find it dead (etcd closes connections that ping more often than every 5s)")
	fs.DurationVar(&c.keepAliveTimeout, "keepalive-timeout", 5*time.Second, "close a connection whose ping is unanswered this long, and dial again")
	fs.IntVar(&c.maxRequestBytes, "max-request-bytes", 0, "client-side limit of a request's size in bytes; 0: gRPC's default, 2 MiB")
	fs.IntVar(&c.maxRecvBytes, "max-recv-bytes", 0, "client-side limit of a response's size in bytes; 0: no limit (math.MaxInt32)")
	fs.StringVarP(&c.discoverySRV, "discovery-srv", "d", "", "not supported: etcdlock does not discover endpoints through DNS SRV records; give --endpoints")
	fs.StringVar(&c.discoverySRVName, "discovery-srv-name", "", "not supported (accepted for etcdctl's environment; without --discovery-srv it means nothing)")
	fs.BoolVar(&c.insecureDiscovery, "insecure-discovery", true, "not supported (accepted for etcdctl's environment; without --discovery-srv it means nothing)")
	fs.BoolVarP(&c.quiet, "quiet", "q", false, "lock, elect: no waiting, holding and campaigning messages on stderr")
}

// applyEnv sets each connection flag that was not given on the command line
// from its environment variable.
func (c *connFlags) applyEnv(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		name := envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		v, ok := os.LookupEnv(name)
		if f.Changed || !ok || err != nil || f.Name == "quiet" {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = usagef("invalid %s=%q: %v", name, v, serr)
		}
	})
	return err
}

// endpointsGiven reports whether --endpoints or ETCDCTL_ENDPOINTS was set.
func (c *connFlags) endpointsGiven() bool {
	f := c.fs.Lookup("endpoints")
	return f != nil && f.Changed
}

// config validates the flags and returns the client configuration.
func (c *connFlags) config() (clientv3.Config, error) {
	cfg := clientv3.Config{
		DialTimeout: c.dialTimeout,
		Logger:      zap.NewNop(),
		// Find a dead connection during a long hold and dial again. etcd
		// closes connections that ping more often than every 5 s (its
		// --grpc-keepalive-min-time), hence the defaults of 10 s and 5 s
		// rather than etcdctl's 2 s and 6 s. Safety does not depend on
		// this: the session ends at its conservative deadline without
		// renewals.
		DialKeepAliveTime:    c.keepAliveTime,
		DialKeepAliveTimeout: c.keepAliveTimeout,
		MaxCallSendMsgSize:   c.maxRequestBytes,
		MaxCallRecvMsgSize:   c.maxRecvBytes,
	}
	switch {
	case c.discoverySRV != "":
		return cfg, usagef("--discovery-srv %s: etcdlock does not discover endpoints through DNS; give --endpoints (or ETCDCTL_ENDPOINTS)", c.discoverySRV)
	case c.keepAliveTime < 0:
		return cfg, usagef("--keepalive-time must not be negative, not %v", c.keepAliveTime)
	case c.keepAliveTimeout < 0:
		return cfg, usagef("--keepalive-timeout must not be negative, not %v", c.keepAliveTimeout)
	case c.maxRequestBytes < 0:
		return cfg, usagef("--max-request-bytes must not be negative, not %d", c.maxRequestBytes)
	case c.maxRecvBytes < 0:
		return cfg, usagef("--max-recv-bytes must not be negative, not %d", c.maxRecvBytes)
	case c.jwtToken != "" && (c.user != "" || c.password != ""):
		return cfg, usagef("--auth-jwt-token and --user or --password cannot be used together")
	}
	cfg.Token = c.jwtToken
	for _, ep := range c.endpoints {
		if ep = strings.TrimSpace(ep); ep != "" {
			cfg.Endpoints = append(cfg.Endpoints, ep)
		}
	}
	if len(cfg.Endpoints) == 0 {
		return cfg, usagef("no endpoints: set --endpoints or ETCDCTL_ENDPOINTS")
	}
	if c.dialTimeout <= 0 {
		return cfg, usagef("--dial-timeout must be positive, not %v", c.dialTimeout)
	}
	if c.commandTimeout <= 0 {
		return cfg, usagef("--command-timeout must be positive, not %v", c.commandTimeout)
	}

	if c.user != "" {
		name, pw, hasPW := strings.Cut(c.user, ":")
		switch {
		case name == "":
			return cfg, usagef("--user %q has no user name", c.user)
		case hasPW && c.password != "":
			return cfg, usagef("the password is given twice: in --user NAME:PASSWORD and in --password")
		case !hasPW && c.password == "":
			return cfg, usagef("--user %s needs a password: --user NAME:PASSWORD, --password or ETCDCTL_PASSWORD", name)
		case !hasPW:
			pw = c.password
		}
		cfg.Username, cfg.Password = name, pw
	} else if c.password != "" {
		return cfg, usagef("--password needs --user")
	}

	if c.cacert != "" || c.cert != "" || c.key != "" || c.insecureSkipVerify || !c.insecureTransport || hasHTTPS(cfg.Endpoints) {
		if (c.cert == "") != (c.key == "") {
			return cfg, usagef("--cert and --key go together")
		}
		// With no --cacert, the servers are checked against the system's roots.
		info := transport.TLSInfo{CertFile: c.cert, KeyFile: c.key, TrustedCAFile: c.cacert, InsecureSkipVerify: c.insecureSkipVerify}
		tc, err := info.ClientConfig()
		if err != nil {
			return cfg, usagef("TLS files: %v", err)
		}
		cfg.TLS = tc
	}
	return cfg, nil
}

func hasHTTPS(eps []string) bool {
	for _, ep := range eps {
		if strings.HasPrefix(ep, "https://") || strings.HasPrefix(ep, "unixs://") {
			return true
		}
	}
	return false
}

// connect returns a client once etcd has answered a read of key, the
// prefix of the lock or election the command works on, so that an
// unreachable cluster, a TLS mismatch or bad credentials fail within
// --dial-timeout with a clear message rather than on the first real
// request. The caller closes the client.
func (c *connFlags) connect(ctx context.Context, key string) (*clientv3.Client, error) {
	cfg, err := c.config()
	if err != nil {
		return nil, err
	}
	return c.dial(ctx, cfg, key)
}

// dial is connect with a ready configuration.
func (c *connFlags) dial(ctx context.Context, cfg clientv3.Config, key string) (*clientv3.Client, error) {
	where := strings.Join(cfg.Endpoints, ",")
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, c.firstContactError(cfg, where, err)
	}
	pctx, cancel := context.WithTimeout(ctx, c.dialTimeout)
	defer cancel()
	if _, err := cli.Get(pctx, key, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		cli.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, c.firstContactError(cfg, where, err)
	}
	return cli, nil
}

// firstContactError explains an error of the first request to etcd.
func (c *connFlags) firstContactError(cfg clientv3.Config, where string, err error) error {
	switch {
	case isAuthError(err):
		return withCode(exitAuth, fmt.Errorf("etcd at %s refused the credentials: %w", where, err))
	case isConnError(err):
		// gRPC only says that the deadline passed; a plain connection
		// attempt says why (refused, certificate not trusted...).
		return withCode(exitUnreachable, fmt.Errorf("cannot reach etcd at %s within --dial-timeout %v: %w%s",
			where, c.dialTimeout, err, diagnose(cfg, min(c.dialTimeout, time.Second))))
	}
	return fmt.Errorf("etcd at %s: %w", where, err)
}

// diagnose tries a TCP connection and, where the client would use TLS, a
// TLS handshake to each endpoint, each within d, and returns what failed,
// as "; ENDPOINT: ERROR" for each, or "".
func diagnose(cfg clientv3.Config, d time.Duration) string {
	notes := make([]string, len(cfg.Endpoints))
	var wg sync.WaitGroup
	for i, ep := range cfg.Endpoints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := probeEndpoint(ep, cfg.TLS, d); err != nil {
				notes[i] = fmt.Sprintf("; %s: %v", ep, err)
			}
		}()
	}
	wg.Wait()
	return strings.Join(notes, "")
}

// probeEndpoint connects to ep as the client would, without gRPC.
func probeEndpoint(ep string, tc *tls.Config, d time.Duration) error {
	scheme, addr, ok := strings.Cut(ep, "://")
	if !ok {
		scheme, addr = "", ep
	}
	network := "tcp"
	if strings.HasPrefix(scheme, "unix") {
		network = "unix"
	}
	conn, err := net.DialTimeout(network, addr, d)
	if err != nil {
		return err
	}
	defer conn.Close()
	if tc == nil || scheme == "http" || scheme == "unix" {
		return nil
	}
	tc = tc.Clone()
	if host, _, err := net.SplitHostPort(addr); err == nil && tc.ServerName == "" {
		tc.ServerName = host
	}
	tc.NextProtos = []string{"h2"}
	conn.SetDeadline(time.Now().Add(d))
	tlsConn := tls.Client(conn, tc)
	if err := tlsConn.Handshake(); err != nil {
		return fmt.Errorf("TLS handshake: %w", err)
	}
	// With TLS 1.3 a server that refuses the client's certificate says so
	// only after the handshake.
	conn.SetDeadline(time.Now().Add(min(d, 200*time.Millisecond)))
	var b [1]byte
	if _, err := tlsConn.Read(b[:]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("TLS: %w", err)
	}
	return nil
}

// requestCtx bounds one request by --command-timeout.
func (c *connFlags) requestCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.commandTimeout)
}
