package ingest

// How the durable consumer's deliveries are acknowledged.

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Acks is how a consumer's deliveries are acknowledged once stored.
type Acks int

const (
	// AcksAuto is AcksNone where the checkpoint alone can carry
	// exactly-once, AcksBatch elsewhere (ChooseAcks).
	AcksAuto Acks = iota
	// AcksNone acknowledges nothing (JetStream's AckNone): the database's
	// checkpoint is the only record of what is stored, and every start,
	// lost delivery and recreation resets the consumer to after it. The
	// server then keeps no per-message state for the consumer: with an
	// acknowledgement policy it tracks every delivered message until its
	// ack, two batches (~245,000 single-event messages) at a time, which
	// cost serve ~12% of its CPU (README, benchmarks).
	AcksNone
	// AcksBatch acknowledges each stored batch with one AckAll.
	AcksBatch
	// AcksEach acknowledges every stored message (AckExplicit).
	AcksEach
)

func (a Acks) String() string {
	switch a {
	case AcksAuto:
		return "auto"
	case AcksNone:
		return "none"
	case AcksBatch:
		return "all"
	case AcksEach:
		return "explicit"
	}
	return "acks(" + strconv.Itoa(int(a)) + ")"
}

func (a Acks) policy() jetstream.AckPolicy {
	switch a {
	case AcksNone:
		return jetstream.AckNonePolicy
	case AcksEach:
		return jetstream.AckExplicitPolicy
	}
	return jetstream.AckAllPolicy
}

// acksOf is the Acks of a consumer's ack policy.
func acksOf(p jetstream.AckPolicy) Acks {
	switch p {
	case jetstream.AckNonePolicy:
		return AcksNone
	case jetstream.AckExplicitPolicy:
		return AcksEach
	}
	return AcksBatch
}

// resetMajor.resetMinor is the first server version with the consumer reset API
// (Rewind), without which nothing would deliver again what an AckNone
// consumer lost.
const resetMajor, resetMinor = 2, 14

// ChooseAcks resolves AcksAuto for a stream on a server of version
// serverVersion. Acknowledging nothing is safe only where the checkpoint
// can stand in for the acknowledgements:
//   - a limits stream: an interest stream deletes what is acknowledged,
//     and with AckNone what is merely delivered, so a crash before the
//     commit would lose it;
//   - a server that can reset a consumer to a sequence (2.14 and later):
//     the source rewinds to after the checkpoint at start and after a lost
//     delivery, where older servers can only redeliver after the ack wait.
//
// A work-queue stream accepts only consumers that acknowledge every
// message (AcksEach); anything else gets AcksBatch.
func ChooseAcks(want Acks, retention jetstream.RetentionPolicy, serverVersion string) Acks {
	switch {
	case want != AcksAuto:
		return want
	case retention == jetstream.WorkQueuePolicy:
		return AcksEach
	case retention == jetstream.LimitsPolicy && versionAtLeast(serverVersion, resetMajor, resetMinor):
		return AcksNone
	}
	return AcksBatch
}

// versionAtLeast compares a server's "major.minor.patch[-suffix]" version
// with major.minor; an unreadable version is taken as older.
func versionAtLeast(v string, major, minor int) bool {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return false
	}
	maj, err1 := strconv.Atoi(parts[0])
	mnr, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return maj > major || (maj == major && mnr >= minor)
}

// streamRetention reads the retention of the stream a consumer will read.
func streamRetention(ctx context.Context, js jetstream.JetStream, stream string) (jetstream.RetentionPolicy, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("look up stream %s: %w", stream, err)
	}
	return st.CachedInfo().Config.Retention, nil
}
