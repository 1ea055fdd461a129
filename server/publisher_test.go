package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
)

// The refusal streak that stops a publish is the stream's alone: messages
// lost with the connection end it, so that the refusals of a stream still
// loading after a long outage do not count the outage as refusing.
func TestRefusalStreakEndsWithTheConnection(t *testing.T) {
	var stopped error
	p := &publisher{tries: map[string]int{}, attempts: DefaultPublishAttempts, ackWait: time.Second,
		span: 50 * time.Millisecond, stop: func(err error) { stopped = err }}
	full := &jetstream.APIError{Code: 503, ErrorCode: 10077, Description: "maximum messages exceeded"}
	msg := func(i int) *nats.Msg {
		m := nats.NewMsg("mcp.audit.pve")
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("m%d", i))
		p.count(m) // sent once
		return m
	}
	for i := range refusalsToStop - 1 {
		p.failed(msg(i), full)
	}
	p.failed(msg(1000), nats.ErrDisconnected) // the server went away
	time.Sleep(2 * p.span)                    // for longer than the span
	p.failed(msg(1001), full)                 // back, still refusing for a moment
	assert.NoError(t, stopped)

	// A stream that goes on refusing for the span stops it.
	for i := range refusalsToStop {
		p.failed(msg(2000+i), full)
	}
	time.Sleep(2 * p.span)
	p.failed(msg(3000), full)
	assert.ErrorIs(t, stopped, errRefused)
}
