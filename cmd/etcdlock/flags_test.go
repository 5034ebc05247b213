package main

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// Bad flags, arguments and variables exit 2 with a message that says what
// is wrong, before talking to etcd.
func TestBadInput(t *testing.T) {
	begin(t)
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"lock without a name", nil, []string{"lock"}, "requires at least 1 arg"},
		{"lock with an empty name", nil, []string{"lock", "", "--", "true"}, "lock NAME must not be empty"},
		{"lock with two names", nil, []string{"lock", "a", "b", "--", "true"}, "lock takes one NAME before --"},
		{"lock with nothing before --", nil, []string{"lock", "--", "true"}, "lock needs a NAME before --"},
		{"zero TTL", nil, []string{"lock", "--ttl", "0", "x"}, "--ttl 0: concurrency: TTL must be positive"},
		{"--try and --timeout", nil, []string{"lock", "--try", "--timeout", "1s", "x"}, "--try and --timeout cannot be used together"},
		{"negative --kill-grace", nil, []string{"lock", "--kill-grace", "-1s", "x"}, "--kill-grace must not be negative"},
		{"negative bare --kill-grace", nil, []string{"elect", "--kill-grace", "-1", "x", "v", "--", "true"}, "--kill-grace must not be negative"},
		{"negative bare --timeout", nil, []string{"lock", "--timeout", "-1", "x"}, "--timeout must not be negative"},
		{"--max-hold under a second", nil, []string{"lock", "--max-hold", "0.5", "x"}, "--max-hold 500ms: concurrency: max hold must be at least a second"},
		{"zero --health-failures", nil, []string{"lock", "--health-cmd", "true", "--health-failures", "0", "x"}, "--health-failures 0: concurrency: invalid health check"},
		{"zero --health-interval", nil, []string{"elect", "--health-cmd", "true", "--health-interval", "0", "x", "v"}, "--health-interval 0s: concurrency: invalid health check"},
		{"negative --lock-delay", nil, []string{"lock", "--lock-delay", "-1", "x"}, "--lock-delay -1s: concurrency: lock delay must not be negative"},
		{"--lock-delay with --limit", nil, []string{"lock", "--lock-delay", "5", "--limit", "2", "x"}, "--lock-delay works with a plain lock only"},
		{"negative --max-hold", nil, []string{"lock", "--max-hold", "-1m", "x"}, "--max-hold -1m0s: concurrency: max hold must be at least a second"},
		{"bad --timeout", nil, []string{"lock", "--timeout", "soon", "x"}, `invalid argument "soon" for "--timeout" flag: "soon" is neither a number of seconds nor a duration`},
		{"bad --signal", nil, []string{"lock", "--signal", "FOO", "x"}, `invalid argument "FOO" for "-s, --signal" flag: "FOO" is not a signal name`},
		{"bad elect --signal", nil, []string{"elect", "-s", "0", "x", "v", "--", "true"}, `invalid argument "0" for "-s, --signal" flag: 0 is not a signal number`},
		{"bad --conflict-exit-code", nil, []string{"lock", "-E", "256", "x"}, `invalid argument "256" for "-E, --conflict-exit-code" flag: "256" is not an exit code from 0 to 255`},
		{"unknown flag", nil, []string{"lock", "--bogus", "x"}, "unknown flag: --bogus"},
		{"unknown command", nil, []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"bad duration", nil, []string{"--dial-timeout", "soon", "inspect", "x"}, `invalid argument "soon"`},
		{"zero command timeout", nil, []string{"--command-timeout", "0s", "inspect", "x"}, "--command-timeout must be positive"},
		{"bad variable", []string{"ETCDCTL_DIAL_TIMEOUT=soon"}, []string{"inspect", "x"}, `invalid ETCDCTL_DIAL_TIMEOUT="soon"`},
		{"empty endpoints", []string{"ETCDCTL_ENDPOINTS="}, []string{"inspect", "x"}, "no endpoints"},
		{"user without password", nil, []string{"--user", "alice", "inspect", "x"}, "--user alice needs a password"},
		{"password twice", nil, []string{"--user", "alice:a", "--password", "b", "inspect", "x"}, "the password is given twice"},
		{"password without user", nil, []string{"--password", "b", "inspect", "x"}, "--password needs --user"},
		{"cert without key", nil, []string{"--cert", "c.pem", "inspect", "x"}, "--cert and --key go together"},
		{"missing CA file", nil, []string{"--cacert", "/nonexistent/ca.pem", "inspect", "x"}, "TLS files"},
		{"inspect without a name", nil, []string{"inspect"}, "accepts 1 arg"},
		{"force-unlock without --key", nil, []string{"force-unlock", "x"}, "force-unlock needs --key"},
		{"elect without a proposal", nil, []string{"elect", "x"}, "elect needs a PROPOSAL"},
		{"elect --listen with a proposal", nil, []string{"elect", "--listen", "x", "p"}, "elect --listen takes no PROPOSAL"},
		{"demo without workers", nil, []string{"demo", "--workers", "0"}, "--workers must be at least 1"},
		{"DNS discovery", nil, []string{"-d", "example.com", "inspect", "x"}, "--discovery-srv example.com: etcdlock does not discover endpoints through DNS"},
		{"DNS discovery variable", []string{"ETCDCTL_DISCOVERY_SRV=example.com"}, []string{"lock", "x", "--", "true"}, "--discovery-srv example.com: etcdlock does not discover endpoints through DNS"},
		{"JWT and user", nil, []string{"--auth-jwt-token", "t", "--user", "a:b", "inspect", "x"}, "--auth-jwt-token and --user or --password cannot be used together"},
		{"negative keepalive", nil, []string{"--keepalive-time", "-1s", "inspect", "x"}, "--keepalive-time must not be negative"},
		{"bad keepalive variable", []string{"ETCDCTL_KEEPALIVE_TIMEOUT=soon"}, []string{"inspect", "x"}, `invalid ETCDCTL_KEEPALIVE_TIMEOUT="soon"`},
		{"negative request limit", nil, []string{"--max-request-bytes", "-1", "inspect", "x"}, "--max-request-bytes must not be negative"},
		{"bare etcdlock", nil, nil, "no command given"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Now()
			_, stderr := expectRun(t, 10*time.Second, exitUsage, tc.env, tc.args, "etcdlock: "+tc.want, "--help")
			if strings.Count(stderr, tc.want) != 1 {
				t.Errorf("message printed more than once:\n%s", stderr)
			}
			if took := time.Since(t0); took > 5*time.Second {
				t.Errorf("took %v to reject bad input", took)
			}
		})
	}
}

// An endpoint that refuses connections, or accepts them and never
// answers, fails every command within the dial timeout with exit 120 and
// a message that names the endpoint.
func TestUnreachable(t *testing.T) {
	begin(t)
	// A port that was just free, and a listener that never accepts: the
	// kernel completes the TCP handshake, but nothing answers.
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := free.Addr().String()
	free.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() }) // after the parallel subtests

	for ep, why := range map[string]string{refused: "connection refused", silent.Addr().String(): ""} {
		for _, args := range [][]string{
			{"lock", "x", "--", "true"},
			{"lock", "--try", "x"},
			{"inspect", "x"},
			{"force-unlock", "x", "--key", "x/1"},
			{"elect", "x", "p"},
			{"elect", "--listen", "x"},
			{"demo"},
		} {
			t.Run(ep+" "+strings.ReplaceAll(strings.Join(args, " "), "/", "_"), func(t *testing.T) {
				t.Parallel()
				t0 := time.Now()
				expectRun(t, 10*time.Second, exitUnreachable, nil, append([]string{"--endpoints", ep, "--dial-timeout", "1s"}, args...),
					"cannot reach etcd at "+ep, "--dial-timeout 1s", why)
				if took := time.Since(t0); took > 5*time.Second {
					t.Errorf("gave up after %v with --dial-timeout 1s", took)
				}
			})
		}
	}
}

// Issue 23: etcdctl's other connection flags, and their variables, have
// their meaning; DNS discovery is refused (TestBadInput), and its two
// companions alone change nothing, as in etcdctl.
func TestConnFlags(t *testing.T) {
	pfx := begin(t)
	c := sharedClient(t)
	ok := func(env []string, args ...string) {
		t.Helper()
		expectRun(t, 10*time.Second, 0, env, append(args, "lock", "--try", pfx, "--", "true"))
	}
	ok(nil, "--keepalive-time", "6s", "--keepalive-timeout", "2s", "--max-request-bytes", "65536", "--max-recv-bytes", "65536")
	ok([]string{"ETCDCTL_KEEPALIVE_TIME=6s", "ETCDCTL_KEEPALIVE_TIMEOUT=2s", "ETCDCTL_INSECURE_TRANSPORT=true"})
	ok([]string{"ETCDCTL_DISCOVERY_SRV_NAME=x", "ETCDCTL_INSECURE_DISCOVERY=false"}, "--discovery-srv-name", "y", "--insecure-discovery=false")

	// --insecure-transport=false: TLS for an endpoint without a scheme
	// even without TLS files, which a plain etcd does not speak.
	noScheme := "ETCDCTL_ENDPOINTS=" + strings.TrimPrefix(shared.endpoints[0], "http://")
	expectRun(t, 10*time.Second, 0, []string{noScheme}, []string{"inspect", pfx})
	for _, tc := range []struct {
		env  []string
		args []string
	}{
		{[]string{noScheme}, []string{"--insecure-transport=false"}},
		{[]string{noScheme, "ETCDCTL_INSECURE_TRANSPORT=false"}, nil},
	} {
		expectRun(t, 10*time.Second, exitUnreachable, tc.env, append(tc.args, "--dial-timeout", "1s", "inspect", pfx), "TLS")
	}
	// The size limits apply to etcdlock's requests and responses.
	expectRun(t, 10*time.Second, exitError, nil, []string{"--max-request-bytes", "8", "inspect", pfx}, "larger than max")
	expectRun(t, 10*time.Second, exitError, nil, []string{"--max-recv-bytes", "8", "inspect", pfx}, "larger than max")
	etcdtest.WaitKeys(t, c, pfx, 0)
}

// --help documents the commands, the environment variables and every exit
// code.
func TestHelp(t *testing.T) {
	begin(t)
	out, _ := expectRun(t, 10*time.Second, 0, nil, []string{"--help"})
	for _, want := range []string{
		"lock", "elect", "inspect", "force-unlock", "demo",
		"ETCDCTL_ENDPOINTS", "ETCDCTL_DIAL_TIMEOUT", "ETCDCTL_COMMAND_TIMEOUT", "ETCDCTL_CACERT", "ETCDCTL_CERT",
		"ETCDCTL_KEY", "ETCDCTL_INSECURE_SKIP_TLS_VERIFY", "ETCDCTL_USER", "ETCDCTL_PASSWORD",
		"ETCDCTL_AUTH_JWT_TOKEN", "ETCDCTL_INSECURE_TRANSPORT", "ETCDCTL_KEEPALIVE_TIME", "ETCDCTL_KEEPALIVE_TIMEOUT",
		"ETCDCTL_MAX_REQUEST_BYTES", "ETCDCTL_MAX_RECV_BYTES", "--discovery-srv", "--insecure-discovery", "--version",
		"120", "121", "122", "123", "124", "125", "126", "127", "128+N", "*/10 * * * *",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("etcdlock --help does not mention %q", want)
		}
	}
	out, _ = expectRun(t, 10*time.Second, 0, nil, []string{"lock", "--help"})
	for _, want := range []string{"ETCD_LOCK_KEY", "ETCD_LOCK_REV", "--kill-grace", "--try", "--timeout", "--ttl", "122", "123", "124", "SIGKILL",
		"process group", "--foreground", "-n, --limit", "--weight", "-q, --quiet", "/healthz"} {
		if !strings.Contains(out, want) {
			t.Errorf("etcdlock lock --help does not mention %q", want)
		}
	}
}
