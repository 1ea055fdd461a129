package redact

import (
	"errors"
	"fmt"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"":                           "",
		"nats://127.0.0.1:4222":      "nats://127.0.0.1:4222",
		"nats://alice:s3cret@h:4222": "nats://alice:xxxxx@h:4222",
		"nats://t0ken@h:4222":        "nats://xxxxx@h:4222",
		"tls://a:p@w@h:4222/x?y=1":   "tls://a:xxxxx@h:4222/x?y=1",
		"nats://a:p1@h1:4222, nats://t0k@h2:4222,nats://h3:4222": "nats://a:xxxxx@h1:4222, nats://xxxxx@h2:4222,nats://h3:4222",
		"a:p@h:4222":     "a:xxxxx@h:4222",
		"nats://a:%zz@h": "nats://a:xxxxx@h",
		// A password holding a character that ends a URL's authority,
		// or separates a list's URLs.
		"nats://gw:SuperSecret/Pass@10.0.0.1:4222": "nats://gw:xxxxx@10.0.0.1:4222",
		"nats://gw:Secret,Part2@h:4222":            "nats://gw:xxxxx@h:4222",
		"nats://gw:p?w#x@h,nats://u:v,w@h2":        "nats://gw:xxxxx@h,nats://u:xxxxx@h2",
		"a:p1@h1:4222,b:p2@h2:4222":                "a:xxxxx@h2:4222",
	} {
		assert.Equal(t, want, URL(in), in)
	}
}

// A URL that does not parse is quoted whole in the parser's error: the
// error says what is wrong with it, and the URL only as URL hides it.
func TestError(t *testing.T) {
	raw := "nats://gw:SecretPW%zz@127.0.0.1:1"
	_, perr := url.Parse(raw)
	require.Error(t, perr)
	err := Error(fmt.Errorf("nats: %w", perr), raw)
	assert.NotContains(t, err.Error(), "SecretPW")
	assert.NotContains(t, err.Error(), "%zz")
	assert.Contains(t, err.Error(), "nats://gw:xxxxx@127.0.0.1:1 holds an invalid % escape")
	other := errors.New("nats: no servers available for connection")
	assert.Equal(t, other, Error(other, raw))
	assert.NoError(t, Error(nil, raw))
}

func TestNKey(t *testing.T) {
	seed := "SUAIBDPBAUTWCWBKIO6XHQNINK5FWJW4OHLXC3HQ2KFE4PEJUA44CNHTAM"
	assert.Equal(t, "S..."+Mask, NKey(seed))
	assert.Equal(t, "", NKey(""))
}
