package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// probeTimeout bounds the /healthz probe: a CLI with no daemon running must
// fall back to the file without a noticeable delay.
const probeTimeout = 500 * time.Millisecond

// Forward runs a command in the daemon listening on listen (http.listen),
// copying its output to stdout and stderr. reached is false, with a nil
// error, when no mcptrail daemon answers there: the caller then opens the
// database itself. Once a daemon answered, any failure is an error.
func Forward(ctx context.Context, listen, token string, args []string, stdout, stderr io.Writer) (exitCode int, reached bool, err error) {
	base := baseURL(listen)
	// No proxy: the daemon is local (or at least not behind the user's proxy).
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(pctx, http.MethodGet, base+"/healthz", nil)
	if err != nil {
		return 0, false, fmt.Errorf("http.listen %s: %w", listen, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, false, nil // nothing listens (or it does not answer in time)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get(identHeader) == "" {
		return 0, false, nil // something else listens there
	}

	body, err := json.Marshal(RunRequest{Args: args})
	if err != nil {
		return 0, true, fmt.Errorf("encode request: %w", err)
	}
	req, err = http.NewRequestWithContext(ctx, http.MethodPost, base+RunPath, bytes.NewReader(body))
	if err != nil {
		return 0, true, fmt.Errorf("daemon at %s: %w", base, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err = client.Do(req)
	if err != nil {
		return 0, true, fmt.Errorf("daemon at %s: %w", base, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized:
		return 0, true, fmt.Errorf("daemon at %s: %w", base, errUnauthorized)
	default:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return 0, true, fmt.Errorf("daemon at %s answered %s: %s", base, resp.Status, bytes.TrimSpace(msg))
	}
	var out RunResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, true, fmt.Errorf("daemon at %s: decode answer: %w", base, err)
	}
	if _, err := io.WriteString(stdout, out.Stdout); err != nil {
		return out.ExitCode, true, fmt.Errorf("write output: %w", err)
	}
	if _, err := io.WriteString(stderr, out.Stderr); err != nil {
		return out.ExitCode, true, fmt.Errorf("write output: %w", err)
	}
	return out.ExitCode, true, nil
}
