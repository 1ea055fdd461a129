package server

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// The embedded server requires authentication. Two kinds of users exist:
//
//   - the daemon itself, with full permissions (the JetStream API): nats.token,
//     or nats.user with nats.password, when set; otherwise a user made up at
//     start with a random password that is never written anywhere;
//   - gateways (nats.embedded.users, or the default user "gateway"), which may
//     only publish to mcp.audit.<their servers> and subscribe to _INBOX.> for
//     their publish acknowledgements. They cannot call $JS.API, subscribe to
//     the audit subjects or read the stream.
//
// Gateways sign in to an account of their own, gatewayAccount, which
// imports the audit subjects as a service from the daemon's account (the
// global one, where the stream has always lived). NATS checks a publish's
// subject, not its reply subject, and JetStream sends its acknowledgement
// to the reply subject as the server itself: in one account a gateway could
// have the server publish an acknowledgement on any subject, the alerts and
// other servers' audit subjects among them. Across the import the server
// replaces the reply with one of its own and hands the acknowledgement back
// in the gateways' account, where nothing but their acknowledgements lives.
//
// The daemon receives its own replies (pull deliveries, API answers) on
// daemonInboxPrefix instead of _INBOX, on the embedded server and on
// nats.url, so that a gateway subscribed to _INBOX.> sees none of them; the
// CLI's --nats takes the shards' answers on OperatorInboxPrefix.

const (
	// DefaultGatewayUser is the gateway user `serve` creates when
	// nats.embedded.users is empty.
	DefaultGatewayUser = "gateway"
	// GatewayPasswordFileName is the default gateway password file, beside
	// the database.
	GatewayPasswordFileName = "nats-gateway.password"
	// daemonUser is the daemon's own user when nats.user is not set.
	daemonUser        = "mcptrail-daemon"
	daemonInboxPrefix = "_MCPTRAIL_INBOX"
	gatewayInbox      = "_INBOX.>"
	// replyWaitLimit is how long the server keeps the way back of a
	// gateway's message that named a reply subject.
	replyWaitLimit = 5 * time.Second
	// gatewayAccount is the embedded server's account of the gateways.
	gatewayAccount = "mcptrail-gateways"
	// OperatorInboxPrefix is where the CLI's --nats takes its replies (the
	// shards' answers, the JetStream API's), out of the gateways' _INBOX.>:
	// an operator's NATS user subscribes to OperatorInboxPrefix + ".>".
	OperatorInboxPrefix = "_MCPTRAIL_CLI_INBOX"
)

// EmbeddedUser is one entry of nats.embedded.users: a gateway's login to the
// embedded server.
type EmbeddedUser struct {
	User string
	// PasswordFile holds the password; a missing file is created with a
	// random one (mode 0600).
	PasswordFile string
	// NKey is the user's public NKey (U...): it signs in with the seed,
	// instead of a password.
	NKey string
	// Servers are the MCP servers it may publish events for; empty or
	// ["*"] means all.
	Servers []string
}

func (u EmbeddedUser) allServers() bool {
	return len(u.Servers) == 0 || slices.Equal(u.Servers, []string{"*"})
}

// GatewayPasswordFile is the default gateway's password file: the configured
// one (nats.embedded.gateway_password_file), else GatewayPasswordFileName
// beside the database file dbPath.
func GatewayPasswordFile(configured, dbPath string) string {
	if configured != "" {
		return configured
	}
	return filepath.Join(filepath.Dir(dbPath), GatewayPasswordFileName)
}

// embeddedAuth is who may connect to the embedded server, and how the
// daemon itself does.
type embeddedAuth struct {
	token    string
	users    []*natsserver.User
	nkeys    []*natsserver.NkeyUser
	accounts []*natsserver.Account // the daemon's (global) one and the gateways'
	daemon   nats.Option
	gateways []EmbeddedUser // resolved: the default gateway when none is configured
}

// newEmbeddedAuth builds the embedded server's users. dbPath places the
// default gateway's password file.
func newEmbeddedAuth(opts Options, dbPath string, log *slog.Logger) (*embeddedAuth, error) {
	a := &embeddedAuth{}
	switch {
	case opts.Token != "":
		a.token, a.daemon = opts.Token, nats.Token(opts.Token)
	default:
		user, password := opts.User, opts.Password
		if user == "" {
			pw, err := randomPassword()
			if err != nil {
				return nil, err
			}
			user, password = daemonUser, pw
		}
		a.users = append(a.users, &natsserver.User{Username: user, Password: password}) // nil permissions: everything
		a.daemon = nats.UserInfo(user, password)
	}

	prefix := strings.TrimSuffix(opts.Subject, ">")
	daemonAcc, gatewayAcc, err := gatewayAccounts(prefix)
	if err != nil {
		return nil, err
	}
	a.accounts = []*natsserver.Account{daemonAcc, gatewayAcc}
	a.gateways = opts.EmbeddedUsers
	if len(a.gateways) == 0 {
		a.gateways = []EmbeddedUser{{User: DefaultGatewayUser, PasswordFile: GatewayPasswordFile(opts.GatewayPasswordFile, dbPath)}}
	}
	for i, u := range a.gateways {
		perms := gatewayPermissions(prefix, u)
		if u.NKey != "" {
			a.nkeys = append(a.nkeys, &natsserver.NkeyUser{Nkey: u.NKey, Permissions: perms, Account: gatewayAcc})
			continue
		}
		key := fmt.Sprintf("nats.embedded.users[%d].password_file", i)
		if len(opts.EmbeddedUsers) == 0 {
			key = "nats.embedded.gateway_password_file"
		}
		pw, err := ensurePasswordFile(u.PasswordFile, key, log)
		if err != nil {
			return nil, err
		}
		a.users = append(a.users, &natsserver.User{Username: u.User, Password: pw, Permissions: perms, Account: gatewayAcc})
	}
	return a, nil
}

// gatewayAccounts are the daemon's account, the global one, exporting the
// audit subjects (prefix + ">") to the gateways' account alone as a
// service, and the gateways' account importing them.
func gatewayAccounts(prefix string) (daemon, gateways *natsserver.Account, err error) {
	daemon = natsserver.NewAccount(natsserver.DEFAULT_GLOBAL_ACCOUNT)
	gateways = natsserver.NewAccount(gatewayAccount)
	if err := daemon.AddServiceExport(prefix+">", []*natsserver.Account{gateways}); err != nil {
		return nil, nil, fmt.Errorf("embedded NATS server: export %s> to the gateways' account: %w", prefix, err)
	}
	// The server keeps each request's way back until its reply, or this
	// long: JetStream acknowledges in milliseconds, but in core mode
	// nothing replies, and the default two minutes would hold every
	// message a gateway sends with a reply subject.
	if err := daemon.SetServiceExportResponseThreshold(prefix+">", replyWaitLimit); err != nil {
		return nil, nil, fmt.Errorf("embedded NATS server: export %s>: %w", prefix, err)
	}
	if err := gateways.AddServiceImport(daemon, prefix+">", ""); err != nil {
		return nil, nil, fmt.Errorf("embedded NATS server: import %s> into the gateways' account: %w", prefix, err)
	}
	return daemon, gateways, nil
}

// gatewayPermissions lets a gateway publish its servers' events and receive
// its publish acknowledgements, and nothing else.
func gatewayPermissions(prefix string, u EmbeddedUser) *natsserver.Permissions {
	allow := []string{prefix + ">"}
	if !u.allServers() {
		allow = allow[:0]
		for _, s := range u.Servers {
			allow = append(allow, prefix+s)
		}
	}
	return &natsserver.Permissions{
		Publish:   &natsserver.SubjectPermission{Allow: allow},
		Subscribe: &natsserver.SubjectPermission{Allow: []string{gatewayInbox}},
	}
}

// apply puts the users into the server's options.
func (a *embeddedAuth) apply(o *natsserver.Options) {
	// With users configured, nats-server still accepts the token from a
	// client that names no user.
	o.Authorization, o.Users, o.Nkeys, o.Accounts = a.token, a.users, a.nkeys, a.accounts
}

// logGateways tells at INFO how gateways connect: user, where the password
// is, the URL. Never the password.
func (a *embeddedAuth) logGateways(log *slog.Logger, url string) {
	for _, u := range a.gateways {
		servers := "all"
		if !u.allServers() {
			servers = strings.Join(u.Servers, ",")
		}
		if u.NKey != "" {
			log.Info("gateways connect to the embedded NATS server with their NKey seed", "url", url, "nkey", u.NKey,
				"user", u.User, "servers", servers)
			continue
		}
		log.Info("gateways connect to the embedded NATS server as this user, with the password in this file",
			"url", url, "user", u.User, "password_file", u.PasswordFile, "servers", servers,
			"example", fmt.Sprintf(`nats pub --server %s --user %s --password "$(cat %s)" mcp.audit.<server> '<event>'`, url, u.User, u.PasswordFile))
	}
}

// randomPassword is 192 random bits, URL-safe.
func randomPassword() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate a NATS password: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// ensurePasswordFile reads the password in path, or creates the file (mode
// 0600) with a random password when it does not exist. key names the
// setting in errors.
func ensurePasswordFile(path, key string, log *slog.Logger) (string, error) {
	pw, err := ReadPasswordFile(path)
	if err == nil {
		// Whoever reads it may write the audit trail of the gateway's
		// servers: a file every user may read is refused; one its group
		// may read (a gateway running as another user of the group) is
		// warned about.
		if info, serr := os.Stat(path); serr == nil {
			switch mode := info.Mode().Perm(); {
			case mode&0o007 != 0:
				return "", fmt.Errorf("%s %s has mode %04o: every user can read the gateway's password; chmod 600 it (640 for a gateway of the file's group), or remove it to have a new one generated",
					key, path, mode)
			case mode&0o070 != 0:
				log.Warn("the NATS password file can be read by its group; chmod 600 it unless a gateway of the group reads it", "key", key, "file", path,
					"mode", fmt.Sprintf("%04o", mode))
			}
		}
		return pw, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%s: %w", key, err)
	}
	if pw, err = randomPassword(); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return "", fmt.Errorf("%s %s: %w", key, path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return ensurePasswordFile(path, key, log) // another process wrote it first
	}
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", key, path, err)
	}
	_, err = f.WriteString(pw + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return "", fmt.Errorf("%s %s: write the password: %w", key, path, err)
	}
	log.Info("generated a NATS gateway password", "key", key, "file", path)
	return pw, nil
}

// ReadPasswordFile reads a NATS password from a file: its content without
// surrounding white space, which must not be empty.
func ReadPasswordFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the NATS password: %w", err)
	}
	pw := strings.TrimSpace(string(b))
	if pw == "" {
		return "", fmt.Errorf("NATS password file %s is empty: write a password in it, or delete it to have serve generate one", path)
	}
	return pw, nil
}
