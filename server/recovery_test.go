package server

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readyzSeen polls /readyz until it answers code with a body containing
// want, and returns that body.
func (d *daemon) readyzSeen(t *testing.T, code int, want string) string {
	t.Helper()
	var last string
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		c, body := d.get(t, "/readyz", "")
		if c == code && strings.Contains(body, want) {
			return body
		}
		last = body
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("/readyz never answered %d with %q; last: %s", code, want, last)
	return ""
}

// Anyone deletes the stream under the running daemon: /readyz answers 503
// with the reason, the daemon recreates the stream and its consumer (counted
// in /metrics), answers 200 again and stores what is published afterwards.
func TestServeRecreatesADeletedStream(t *testing.T) {
	store := openStore(t)
	opts := testOptions(t)
	d := start(t, store, opts)
	ctx := context.Background()
	_, err := Publish(ctx, gateway(t, opts), events(0, 20, "pve"))
	require.NoError(t, err)
	waitCount(t, store, `SELECT count(*) FROM calls`, 20)

	// Watch /readyz from before the deletion, so that a short 503 is seen.
	seen := make(chan string, 1)
	stopWatch := make(chan struct{})
	go func() {
		defer close(seen)
		for {
			select {
			case <-stopWatch:
				return
			default:
			}
			if resp, err := http.Get("http://" + opts.HTTPListen + "/readyz"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable {
					seen <- string(b)
					return
				}
			}
		}
	}()
	_, admin := connect(t, opts)
	require.NoError(t, admin.DeleteStream(ctx, "MCP_AUDIT"))
	var body string
	select {
	case body = <-seen:
	case <-time.After(15 * time.Second):
	}
	close(stopWatch)
	assert.Contains(t, body, "is missing: recreating it", "/readyz answered 503 with the reason")

	d.readyzSeen(t, http.StatusOK, "ready")
	_, err = admin.Stream(ctx, "MCP_AUDIT")
	require.NoError(t, err)
	_, err = Publish(ctx, gateway(t, opts), events(20, 50, "pve"))
	require.NoError(t, err)
	waitCount(t, store, `SELECT count(*) FROM calls`, 50)
	_, metrics := d.get(t, "/metrics", "")
	assert.Contains(t, metrics, `mcptrail_nats_recreated_total{what="stream"} 1`)
	assert.Contains(t, metrics, `mcptrail_nats_recreated_total{what="consumer"} 1`)
}

// While commits fail (here: a table the batch needs is gone, as a full disk
// would refuse it), /readyz answers 503 with the reason, and 200 again once
// a commit succeeds; nothing is lost.
func TestServeReadyzWhileCommitsFail(t *testing.T) {
	store := openStore(t)
	opts := testOptions(t)
	d := start(t, store, opts)
	_, err := store.DB().Exec(`ALTER TABLE checkpoints RENAME TO checkpoints_away`)
	require.NoError(t, err)
	_, err = Publish(context.Background(), gateway(t, opts), events(0, 10, "pve"))
	require.NoError(t, err)
	d.readyzSeen(t, http.StatusServiceUnavailable, "storing events fails, retrying")
	_, err = store.DB().Exec(`ALTER TABLE checkpoints_away RENAME TO checkpoints`)
	require.NoError(t, err)
	d.readyzSeen(t, http.StatusOK, "ready")
	waitCount(t, store, `SELECT count(*) FROM calls`, 10)
}

// The embedded store's folder deleted under the running daemon: /readyz
// answers 503 and says so.
func TestServeReadyzWhenTheStoreDirIsDeleted(t *testing.T) {
	defer func(d time.Duration) { fileCheck = d }(fileCheck)
	fileCheck = 20 * time.Millisecond
	opts := testOptions(t)
	d := start(t, openStore(t), opts)
	require.NoError(t, os.RemoveAll(opts.EmbeddedStoreDir))
	d.readyzSeen(t, http.StatusServiceUnavailable, "nats.embedded.store_dir "+opts.EmbeddedStoreDir+" was deleted")
}
