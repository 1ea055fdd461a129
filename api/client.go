package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// probeTimeout bounds the hello: a CLI with no daemon running must fall back
// to the file without a noticeable delay.
const probeTimeout = 500 * time.Millisecond

// Client is the CLI's side of the API.
type Client struct {
	Listen string // http.listen
	// Token is the daemon's token (http.token, or read from TokenFile).
	Token     string
	TokenFile string // named in messages when Token is empty
	// CertFile (http.tls.cert) makes the client speak HTTPS and trust that
	// certificate besides the system's roots.
	CertFile string
}

// Sink takes an answer's frames.
type Sink struct {
	Stdout, Stderr io.Writer
	// File writes one file of an output folder; nil refuses files.
	File func(File) error
}

// ErrNoToken is returned when a daemon answers but the client has no token.
var ErrNoToken = errors.New("no API token")

// ErrNotProven is returned when the process answering at http.listen did
// not prove that it holds the client's token: the token was not sent.
var ErrNotProven = errors.New("no proof of the token")

func (c *Client) base() string {
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		host, port = c.Listen, ""
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	scheme := "http"
	if c.CertFile != "" {
		scheme = "https"
	}
	if port == "" {
		return scheme + "://" + host
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// errConnLost means the connection that carried the hello closed before
// the request that carries the token could use it.
var errConnLost = errors.New("the connection to the daemon closed after its hello proof; the token was not sent: try again")

// oneConn dials the daemon once per client: the request that carries the
// token goes over the very connection whose other end proved it holds it,
// so that a process taking the port in between never receives it.
// The hello's proof must name the address the connection reached (remote),
// so that a daemon reached through a relay cannot prove anything for it.
type oneConn struct {
	mu     sync.Mutex
	dialed bool
	remote string
	d      net.Dialer
}

func (o *oneConn) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dialed {
		return nil, errConnLost
	}
	o.dialed = true
	conn, err := o.d.DialContext(ctx, network, addr)
	if err == nil {
		o.remote = conn.RemoteAddr().String()
	}
	return conn, err
}

// remoteAddr is the address the connection reached, "" before it is dialed.
func (o *oneConn) remoteAddr() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.remote
}

// httpClient is a client for one exchange with the daemon (a hello, then
// the request), over one connection.
func (c *Client) httpClient() (*http.Client, *oneConn, error) {
	// No proxy: the daemon is local (or at least not behind the user's proxy).
	conn := &oneConn{}
	tr := &http.Transport{Proxy: nil, MaxConnsPerHost: 1, DialContext: conn.dial}
	if c.CertFile != "" {
		pem, err := os.ReadFile(c.CertFile)
		if err != nil {
			return nil, nil, fmt.Errorf("http.tls.cert: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("http.tls.cert %s: no PEM certificate in it", c.CertFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr}, conn, nil
}

// hello asks whoever listens at http.listen to prove it holds the token.
// reached is false, with a nil error, when no mcptrail daemon answers.
func (c *Client) hello(ctx context.Context, hc *http.Client, conn *oneConn) (reached bool, err error) {
	var challenge [32]byte
	if _, err := rand.Read(challenge[:]); err != nil {
		return false, err
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(pctx, http.MethodGet, c.base()+PathHello+"?challenge="+hex.EncodeToString(challenge[:]), nil)
	if err != nil {
		return false, fmt.Errorf("http.listen %s: %w", c.Listen, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, nil // nothing listens (or it does not answer in time)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.Header.Get(IdentHeader) == "" {
		return false, nil // something else listens there
	}
	if resp.StatusCode != http.StatusOK {
		return true, fmt.Errorf("the daemon at %s answered %s: %s", c.base(), resp.Status, errorText(body))
	}
	if c.Token == "" {
		return true, fmt.Errorf("%w: a daemon answers at %s but this CLI has no token: set http.token "+
			"(MCPTRAIL_HTTP_TOKEN) or run as a user who can read %s (http.token_file)", ErrNoToken, c.base(), c.TokenFile)
	}
	var h Hello
	if err := json.Unmarshal(body, &h); err != nil || h.Service != "mcptrail" || !checkProof(c.Token, challenge[:], conn.remoteAddr(), h.Proof) {
		return true, fmt.Errorf("%w: the process answering at %s (http.listen) did not prove that it holds this CLI's token for that address: "+
			"the token was not sent. Is another program squatting on the port (or relaying it), does the token belong to another daemon, "+
			"or does a port forward stand between this CLI and the daemon (the CLI must reach the address the daemon listens on)?", ErrNotProven, c.base())
	}
	return true, nil
}

// Do sends req to the daemon and copies its answer into sink. reached is
// false, with a nil error, when no daemon answers or the daemon holds
// another database: the caller then opens the file itself. Once a daemon
// answered, any failure is an error. truncated reports a query answer cut at
// the daemon's limits.
func (c *Client) Do(ctx context.Context, req Request, sink Sink) (code int, reached, truncated bool, err error) {
	hc, conn, err := c.httpClient()
	if err != nil {
		return 0, false, false, err
	}
	defer hc.CloseIdleConnections()
	if reached, err := c.hello(ctx, hc, conn); !reached || err != nil {
		return 0, reached, false, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return 0, true, false, fmt.Errorf("encode request: %w", err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base()+req.Path(), bytes.NewReader(body))
	if err != nil {
		return 0, true, false, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := hc.Do(hreq)
	if err != nil {
		return 0, true, false, fmt.Errorf("daemon at %s: %w", c.base(), err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusConflict:
		return 0, false, false, nil
	default:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return 0, true, false, fmt.Errorf("daemon at %s answered %s: %s", c.base(), resp.Status, errorText(msg))
	}
	code, truncated, err = ReadAnswer(resp.Body, sink, "daemon at "+c.base())
	return code, true, truncated, err
}

// ReadAnswer copies an answer's frames into sink and returns its exit code;
// an answer without the exit frame is an error naming from.
func ReadAnswer(r io.Reader, sink Sink, from string) (code int, truncated bool, err error) {
	dec := json.NewDecoder(r)
	for {
		var f Frame
		if err := dec.Decode(&f); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 1, truncated, fmt.Errorf("%s: the answer ended early: %w", from, err)
		}
		switch {
		case f.Stdout != "":
			_, err = io.WriteString(sink.Stdout, f.Stdout)
		case len(f.StdoutBytes) > 0:
			_, err = sink.Stdout.Write(f.StdoutBytes)
		case f.Stderr != "":
			_, err = io.WriteString(sink.Stderr, f.Stderr)
		case f.File != nil:
			if sink.File == nil {
				err = fmt.Errorf("the daemon sent a file (%s) this request did not ask for", f.File.Name)
			} else {
				err = sink.File(*f.File)
			}
		case f.Truncated:
			truncated = true
		case f.Exit != nil:
			return *f.Exit, truncated, nil
		}
		if err != nil {
			return 1, truncated, err
		}
	}
}

// Status asks the daemon which database it holds. reached is false when no
// daemon answers.
func (c *Client) Status(ctx context.Context) (st Status, reached bool, err error) {
	hc, conn, err := c.httpClient()
	if err != nil {
		return st, false, err
	}
	defer hc.CloseIdleConnections()
	if reached, err := c.hello(ctx, hc, conn); !reached || err != nil {
		return st, reached, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base()+PathStatus, nil)
	if err != nil {
		return st, true, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := hc.Do(req)
	if err != nil {
		return st, true, fmt.Errorf("daemon at %s: %w", c.base(), err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return st, true, fmt.Errorf("daemon at %s answered %s: %s", c.base(), resp.Status, errorText(body))
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, true, fmt.Errorf("daemon at %s: %w", c.base(), err)
	}
	return st, true, nil
}

// errorText is the message of an Error body, or the body itself.
func errorText(body []byte) string {
	var e Error
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return e.Error
	}
	return string(bytes.TrimSpace(body))
}
