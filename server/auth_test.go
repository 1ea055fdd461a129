package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/internal/freeport"
)

// securedCase is an external NATS server that demands one kind of
// authentication, the daemon options that satisfy it, and what is missing
// from a daemon that only has the URL.
type securedCase struct {
	name    string
	server  func(t *testing.T, o *natsserver.Options)
	auth    func(t *testing.T) Auth
	scheme  string // nats or tls
	refusal string // in the error of a daemon without auth
}

// The daemon consumes from, and Publish publishes to, an external server
// secured in each way SPEC §7 lists; without the credentials, start-up fails
// with an error that names nats.url and the server's refusal.
func TestServeAgainstSecuredNATS(t *testing.T) {
	dir := t.TempDir()
	pki := newTestPKI(t, dir)
	userSeed, userPub := newNKeyUser(t, dir)
	operator := newOperatorAccount(t, dir)

	for _, tc := range []securedCase{
		{
			name:    "token",
			server:  func(t *testing.T, o *natsserver.Options) { o.Authorization = "s3cret-token" },
			auth:    func(t *testing.T) Auth { return Auth{Token: "s3cret-token"} },
			scheme:  "nats",
			refusal: "Authorization Violation",
		},
		{
			name:    "user and password",
			server:  func(t *testing.T, o *natsserver.Options) { o.Username, o.Password = "gateway", "pa55word" },
			auth:    func(t *testing.T) Auth { return Auth{User: "gateway", Password: "pa55word"} },
			scheme:  "nats",
			refusal: "Authorization Violation",
		},
		{
			name:    "nkey",
			server:  func(t *testing.T, o *natsserver.Options) { o.Nkeys = []*natsserver.NkeyUser{{Nkey: userPub}} },
			auth:    func(t *testing.T) Auth { return Auth{NKey: userSeed} },
			scheme:  "nats",
			refusal: "Authorization Violation",
		},
		{
			name:    "credentials file (operator mode)",
			server:  operator.configure,
			auth:    func(t *testing.T) Auth { return Auth{Creds: operator.creds} },
			scheme:  "nats",
			refusal: "Authorization Violation",
		},
		{
			name: "mutual TLS with a private CA",
			server: func(t *testing.T, o *natsserver.Options) {
				o.TLS, o.TLSVerify, o.TLSTimeout = true, true, 5
				o.TLSConfig = pki.serverConfig(t)
			},
			auth:    func(t *testing.T) Auth { return Auth{TLS: TLS{CA: pki.ca, Cert: pki.clientCert, Key: pki.clientKey}} },
			scheme:  "tls",
			refusal: "certificate",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := externalServer(t, func(o *natsserver.Options) { tc.server(t, o) })
			url := tc.scheme + "://" + ns.Addr().String()

			store := openStore(t)
			opts := testOptions(t)
			opts.URL, opts.User, opts.Password = url, "", ""
			err := Run(context.Background(), store, opts, testLogger(t), nil)
			require.Error(t, err, "a daemon without credentials must be refused")
			assert.Contains(t, err.Error(), "(nats.url)")
			assert.Contains(t, err.Error(), tc.refusal)

			auth := tc.auth(t)
			opts.Creds, opts.NKey, opts.Token, opts.User, opts.Password, opts.TLS =
				auth.Creds, auth.NKey, auth.Token, auth.User, auth.Password, auth.TLS
			start(t, store, opts)
			st, err := Publish(context.Background(), PublishOptions{URL: url, Auth: auth}, events(0, 200, "pve"))
			require.NoError(t, err)
			assert.Equal(t, 200, st.Published)
			waitCount(t, store, `SELECT count(DISTINCT id) FROM calls`, 200)
		})
	}
}

// externalServer runs a NATS server with JetStream that configure secures.
func externalServer(t *testing.T, configure func(o *natsserver.Options)) *natsserver.Server {
	t.Helper()
	o := &natsserver.Options{Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir()}
	configure(o)
	ns, err := natsserver.NewServer(o)
	require.NoError(t, err)
	ns.Start()
	require.True(t, ns.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}

// testPKI is a private CA with a server certificate for 127.0.0.1 and a
// client certificate, as PEM files.
type testPKI struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

func newTestPKI(t *testing.T, dir string) testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mcptrail test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	p := testPKI{ca: writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)}
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (certFile, keyFile string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		require.NoError(t, err)
		keyDER, err := x509.MarshalECPrivateKey(key)
		require.NoError(t, err)
		return writePEM(t, dir, name+".pem", "CERTIFICATE", der), writePEM(t, dir, name+"-key.pem", "EC PRIVATE KEY", keyDER)
	}
	p.serverCert, p.serverKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

// serverConfig requires a client certificate signed by the CA.
func (p testPKI) serverConfig(t *testing.T) *tls.Config {
	t.Helper()
	cfg, err := natsserver.GenTLSConfig(&natsserver.TLSConfigOpts{
		CertFile: p.serverCert, KeyFile: p.serverKey, CaFile: p.ca, Verify: true,
	})
	require.NoError(t, err)
	return cfg
}

func writePEM(t *testing.T, dir, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600))
	return path
}

// newNKeyUser writes a user NKey seed file and returns it with the public key.
func newNKeyUser(t *testing.T, dir string) (seedFile, pub string) {
	t.Helper()
	kp, pub := newKey(t, nkeys.CreateUser)
	seed, err := kp.Seed()
	require.NoError(t, err)
	seedFile = filepath.Join(dir, "user.nk")
	require.NoError(t, os.WriteFile(seedFile, seed, 0o600))
	return seedFile, pub
}

// newKey makes an NKey pair of one kind and returns it with its public key.
func newKey(t *testing.T, create func() (nkeys.KeyPair, error)) (nkeys.KeyPair, string) {
	t.Helper()
	kp, err := create()
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	return kp, pub
}

// operatorAccount is decentralised (JWT) auth: an operator, an account with
// JetStream, and a user's credentials file.
type operatorAccount struct {
	operator *jwt.OperatorClaims
	accounts map[string]string // public key: JWT (the system account and "audit")
	system   string
	creds    string
}

func newOperatorAccount(t *testing.T, dir string) operatorAccount {
	t.Helper()
	okp, opub := newKey(t, nkeys.CreateOperator)
	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "test-operator"
	ojwt, err := oc.Encode(okp)
	require.NoError(t, err)
	operator, err := jwt.DecodeOperatorClaims(ojwt)
	require.NoError(t, err)

	accounts := map[string]string{}
	account := func(name string, jetStream bool) (nkeys.KeyPair, string) {
		kp, pub := newKey(t, nkeys.CreateAccount)
		ac := jwt.NewAccountClaims(pub)
		ac.Name = name
		if jetStream {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		claims, err := ac.Encode(okp)
		require.NoError(t, err)
		accounts[pub] = claims
		return kp, pub
	}
	// JetStream in operator mode needs a system account.
	_, system := account("SYS", false)
	akp, _ := account("audit", true)

	ukp, upub := newKey(t, nkeys.CreateUser)
	uc := jwt.NewUserClaims(upub)
	uc.Name = "mcptrail"
	ujwt, err := uc.Encode(akp)
	require.NoError(t, err)
	useed, err := ukp.Seed()
	require.NoError(t, err)
	creds, err := jwt.FormatUserConfig(ujwt, useed)
	require.NoError(t, err)
	file := filepath.Join(dir, "mcptrail.creds")
	require.NoError(t, os.WriteFile(file, creds, 0o600))
	return operatorAccount{operator: operator, accounts: accounts, system: system, creds: file}
}

func (a operatorAccount) configure(t *testing.T, o *natsserver.Options) {
	t.Helper()
	res := &natsserver.MemAccResolver{}
	for pub, claims := range a.accounts {
		require.NoError(t, res.Store(pub, claims))
	}
	o.TrustedOperators = []*jwt.OperatorClaims{a.operator}
	o.AccountResolver = res
	o.SystemAccount = a.system
}

// Credentials in nats.url (a password, or a token as the user) appear
// nowhere: not in the log of a daemon that connects with them, nor in its
// /metrics, nor in the error and log of one that cannot connect.
func TestServeKeepsURLCredentialsOutOfLogs(t *testing.T) {
	const password, token = "pa55-SECRET-word", "t0ken-SECRET"
	for name, setup := range map[string]func(o *natsserver.Options) string{
		"password": func(o *natsserver.Options) string {
			o.Username, o.Password = "admin", password
			return "admin:" + password
		},
		"token": func(o *natsserver.Options) string { o.Authorization = token; return token },
	} {
		t.Run(name, func(t *testing.T) {
			var userinfo string
			ns := externalServer(t, func(o *natsserver.Options) { userinfo = setup(o) })

			opts := testOptions(t)
			opts.User, opts.Password = "", ""
			opts.URL = "nats://" + userinfo + "@" + ns.Addr().String()
			var log syncBuffer
			d := startLogged(t, opts, &log)
			_, metrics := d.get(t, "/metrics", "")
			d.stop(t)
			assert.Contains(t, log.String(), "connected to NATS")

			// Unreachable: the error names the URL, without the secret.
			opts = testOptions(t)
			opts.User, opts.Password = "", ""
			opts.URL = "nats://" + userinfo + "@" + freeport.Addr(t) + ",nats://" + token + "@" + freeport.Addr(t)
			logger := slog.New(slog.NewTextHandler(&log, nil))
			err := Run(context.Background(), openStore(t), opts, logger, nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "connect to NATS at nats://")
			_, perr := Publish(context.Background(), PublishOptions{URL: opts.URL}, events(0, 1, "pve"))
			require.Error(t, perr)
			for what, text := range map[string]string{"log": log.String(), "/metrics": metrics, "error": err.Error(), "publish error": perr.Error()} {
				assert.NotContains(t, text, password, what)
				assert.NotContains(t, text, token, what)
			}
		})
	}
}
