package redact

import (
	"testing"

	"github.com/stretchr/testify/assert"
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
	} {
		assert.Equal(t, want, URL(in), in)
	}
}

func TestNKey(t *testing.T) {
	seed := "SUAIBDPBAUTWCWBKIO6XHQNINK5FWJW4OHLXC3HQ2KFE4PEJUA44CNHTAM"
	assert.Equal(t, "S..."+Mask, NKey(seed))
	assert.Equal(t, "", NKey(""))
}
