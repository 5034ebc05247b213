package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/tests/v3/framework/integration"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// pki is a throwaway CA with a server and a client certificate, as files.
type pki struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

// newPKI writes a fresh CA, a server certificate for 127.0.0.1 and
// localhost, and a client certificate into a temporary directory.
func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "etcdlock test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	p := pki{ca: filepath.Join(dir, "ca.pem")}
	writePEM(t, p.ca, "CERTIFICATE", caDER)

	issue := func(serial int64, cn string, usage []x509.ExtKeyUsage, ips []net.IP, dns []string) (certPath, keyPath string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  usage,
			IPAddresses:  ips,
			DNSNames:     dns,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		certPath, keyPath = filepath.Join(dir, cn+".pem"), filepath.Join(dir, cn+"-key.pem")
		writePEM(t, certPath, "CERTIFICATE", der)
		writePEM(t, keyPath, "PRIVATE KEY", keyDER)
		return certPath, keyPath
	}
	// The framework's members also use the server certificate as clients.
	p.serverCert, p.serverKey = issue(2, "server", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		[]net.IP{net.IPv4(127, 0, 0, 1)}, []string{"localhost"})
	p.clientCert, p.clientKey = issue(3, "etcdlock-client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil, nil)
	return p
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// The connection flags and their environment variables really set up TLS
// and authentication: against a member that requires client certificates
// and has authentication enabled, lock works with the right ones and fails
// clearly with wrong or missing ones.
func TestTLSAndAuth(t *testing.T) {
	pfx := begin(t)
	p := newPKI(t)
	clus := etcdtest.NewCluster(t, &integration.ClusterConfig{
		Size: 1, UseTCP: true, UseIP: true,
		ClientTLS: &transport.TLSInfo{CertFile: p.serverCert, KeyFile: p.serverKey, TrustedCAFile: p.ca, ClientCertAuth: true},
	})
	ep := clus.Endpoints()[0]
	if !strings.HasPrefix(ep, "https://127.0.0.1:") {
		t.Fatalf("endpoint %s, want https://127.0.0.1:PORT", ep)
	}
	clientTLS, err := transport.TLSInfo{CertFile: p.clientCert, KeyFile: p.clientKey, TrustedCAFile: p.ca}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	withTLS := func(user, password string) func(*clientv3.Config) {
		return func(cfg *clientv3.Config) {
			cfg.TLS = clientTLS.Clone()
			cfg.Username, cfg.Password = user, password
		}
	}

	// alice may use the locks under pfx only.
	admin := etcdtest.NewClient(t, clus.Endpoints(), withTLS("", ""))
	ctx := t.Context()
	for _, step := range []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.RoleAdd(ctx, "locker"); return err },
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "locker", pfx+"/", clientv3.GetPrefixRangeEnd(pfx+"/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := admin.UserAdd(ctx, "alice", "alicepw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "alice", "locker"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	root := etcdtest.NewClient(t, clus.Endpoints(), withTLS("root", "rootpw"))

	tlsFlags := []string{"--endpoints", ep, "--dial-timeout", "1s", "--cacert", p.ca, "--cert", p.clientCert, "--key", p.clientKey}
	lockArgs := func(flags []string, name string) []string {
		return append(append([]string{}, flags...), "lock", name, "--", "sh", "-c", printEnv)
	}

	t.Run("flags", func(t *testing.T) {
		out, _ := expectRun(t, 10*time.Second, 0, nil, lockArgs(append(tlsFlags, "--user", "alice", "--password", "alicepw"), pfx))
		if key, _ := keyRev(t, out); !strings.HasPrefix(key, pfx+"/") {
			t.Errorf("locked with key %q", key)
		}
	})
	t.Run("environment", func(t *testing.T) {
		// No scheme: the TLS variables alone turn TLS on.
		env := []string{
			"ETCDCTL_ENDPOINTS=" + strings.TrimPrefix(ep, "https://"),
			"ETCDCTL_CACERT=" + p.ca, "ETCDCTL_CERT=" + p.clientCert, "ETCDCTL_KEY=" + p.clientKey,
			"ETCDCTL_USER=alice:alicepw", "ETCDCTL_DIAL_TIMEOUT=1s",
		}
		out, _ := expectRun(t, 10*time.Second, 0, env, []string{"lock", pfx, "--", "sh", "-c", printEnv})
		if key, _ := keyRev(t, out); !strings.HasPrefix(key, pfx+"/") {
			t.Errorf("locked with key %q", key)
		}
		expectRun(t, 10*time.Second, 0, env, []string{"inspect", pfx})
	})

	for _, tc := range []struct {
		name  string
		flags []string
		lock  string
		code  int
		want  string
	}{
		{"wrong password", append(tlsFlags, "--user", "alice:wrong"), pfx, exitAuth, "authentication failed"},
		{"no user", tlsFlags, pfx, exitAuth, "user name is empty"},
		{"no permission", append(tlsFlags, "--user", "alice:alicepw"), pfx + "-elsewhere", exitAuth, "permission denied"},
		{"no CA", []string{"--endpoints", ep, "--dial-timeout", "1s", "--cert", p.clientCert, "--key", p.clientKey, "--user", "alice:alicepw"}, pfx, exitUnreachable, "certificate signed by unknown authority"},
		{"no client certificate", []string{"--endpoints", ep, "--dial-timeout", "1s", "--cacert", p.ca, "--user", "alice:alicepw"}, pfx, exitUnreachable, "certificate required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Now()
			_, stderr := expectRun(t, 10*time.Second, tc.code, nil, lockArgs(tc.flags, tc.lock), tc.want)
			t.Logf("exit %d after %v: %s", tc.code, time.Since(t0).Round(time.Millisecond), strings.TrimSpace(stderr))
		})
	}

	resp, err := root.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Fatalf("%d keys left under %s", resp.Count, pfx)
	}
}
