package ingest

// Set-up of the JetStream stream mcptrail reads and of its durable pull
// consumers: created when missing, brought in line with the spec otherwise.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of the stream mcptrail creates and of its consumers.
const (
	DefaultStreamMaxAge = 7 * 24 * time.Hour
	// DefaultDuplicates is the stream's Nats-Msg-Id window. JetStream keeps
	// every id published within it in memory (about 200 bytes each with GC
	// headroom), in the daemon's own heap when the server is embedded, so
	// memory grows with publish rate x window: 5 s costs about 100 MiB at
	// 100k events/s (a 10 s window measured 150 MiB more peak RSS and half
	// the drain rate right after a 1M-event burst). It covers quick retries
	// (a lost ack, a reconnect); a retry after a full publish timeout falls
	// outside it, and the store's id de-duplication catches that one.
	DefaultDuplicates = 5 * time.Second
	DefaultAckWait    = time.Minute
)

// StreamSpec is the stream mcptrail needs: created when missing, otherwise
// updated in place for the settings mcptrail owns (subjects it needs, age and
// size limits, duplicate window), keeping everything an operator set (replicas,
// placement) untouched.
type StreamSpec struct {
	Name       string
	Subjects   []string      // e.g. mcp.audit.>
	MaxAge     time.Duration // 0: DefaultStreamMaxAge; < 0: unlimited
	MaxBytes   int64         // <= 0: unlimited
	Duplicates time.Duration // Nats-Msg-Id de-duplication window; 0: DefaultDuplicates
	// Replicas of a stream created here (1 when <= 0); an existing stream
	// with fewer is raised to it, one with more (an operator's choice) kept.
	Replicas int
}

func (s StreamSpec) maxAge() time.Duration {
	switch {
	case s.MaxAge == 0:
		return DefaultStreamMaxAge
	case s.MaxAge < 0:
		return 0 // JetStream: 0 means unlimited
	}
	return s.MaxAge
}

func (s StreamSpec) maxBytes() int64 {
	if s.MaxBytes <= 0 {
		return -1
	}
	return s.MaxBytes
}

// duplicatesFor is the duplicate window, which JetStream requires to be no
// longer than the stream's max age.
func (s StreamSpec) duplicatesFor(maxAge time.Duration) time.Duration {
	d := s.Duplicates
	if d <= 0 {
		d = DefaultDuplicates
	}
	if maxAge > 0 && d > maxAge {
		d = maxAge
	}
	return d
}

// EnsureStream creates the stream of spec or brings an existing one in line
// with it.
func EnsureStream(ctx context.Context, js jetstream.JetStream, spec StreamSpec) (jetstream.Stream, error) {
	st, err := js.Stream(ctx, spec.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		cfg := jetstream.StreamConfig{
			Name:        spec.Name,
			Description: "MCP gateway audit events (created by mcptrail)",
			Subjects:    spec.Subjects,
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Discard:     jetstream.DiscardOld,
			MaxAge:      spec.maxAge(),
			MaxBytes:    spec.maxBytes(),
			MaxMsgs:     -1,
			Duplicates:  spec.duplicatesFor(spec.maxAge()),
			Replicas:    max(spec.Replicas, 1),
		}
		st, err = js.CreateStream(ctx, cfg)
		if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil, fmt.Errorf("create stream %s on %s: %w", spec.Name, strings.Join(spec.Subjects, ", "), err)
		}
		if err == nil {
			return st, nil
		}
		// Another daemon created it in the meantime: fall through to update it.
		if st, err = js.Stream(ctx, spec.Name); err != nil {
			return nil, fmt.Errorf("look up stream %s: %w", spec.Name, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("look up stream %s: %w", spec.Name, err)
	}

	cfg := st.CachedInfo().Config
	changed := false
	for _, subj := range spec.Subjects {
		if !slices.Contains(cfg.Subjects, subj) {
			cfg.Subjects = append(cfg.Subjects, subj)
			changed = true
		}
	}
	if cfg.MaxAge != spec.maxAge() {
		cfg.MaxAge, changed = spec.maxAge(), true
	}
	if cfg.MaxBytes != spec.maxBytes() {
		cfg.MaxBytes, changed = spec.maxBytes(), true
	}
	if d := spec.duplicatesFor(cfg.MaxAge); cfg.Duplicates != d {
		cfg.Duplicates, changed = d, true
	}
	if cfg.Replicas < spec.Replicas {
		cfg.Replicas, changed = spec.Replicas, true
	}
	if !changed {
		return st, nil
	}
	st, err = js.UpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("update stream %s (subjects %s, max age %s, max bytes %d, replicas %d): %w",
			spec.Name, strings.Join(cfg.Subjects, ", "), cfg.MaxAge, cfg.MaxBytes, cfg.Replicas, err)
	}
	return st, nil
}

// ConsumerSpec is the durable pull consumer of one daemon (or shard).
type ConsumerSpec struct {
	Stream         string
	Durable        string
	FilterSubjects []string // empty: the whole stream
	BatchSize      int      // sizes MaxAckPending so that two full batches are always deliverable
	FetchSize      int
	AckWait        time.Duration
	// Acks is how deliveries are acknowledged; AcksAuto (the default) is
	// resolved by ChooseAcks from the stream's retention and the server's
	// version. The source follows the consumer's policy.
	Acks Acks
}

// ConsumerDescription marks the durable consumers of mcptrail daemons on
// the stream, so that the CLI can tell a shard's consumer from another
// program's.
const ConsumerDescription = "mcptrail ingest into DuckDB"

// EnsureConsumer creates or updates the durable pull consumer of spec.
func EnsureConsumer(ctx context.Context, js jetstream.JetStream, spec ConsumerSpec) (jetstream.Consumer, error) {
	batch := spec.BatchSize
	if batch <= 0 {
		batch = DefaultBatchSize
	}
	fetch := spec.FetchSize
	if fetch <= 0 {
		fetch = DefaultFetchSize
	}
	ackWait := spec.AckWait
	if ackWait <= 0 {
		ackWait = DefaultAckWait
	}
	acks := spec.Acks
	if acks == AcksAuto {
		retention, err := streamRetention(ctx, js, spec.Stream)
		if err != nil {
			return nil, err
		}
		acks = ChooseAcks(acks, retention, js.Conn().ConnectedServerVersion())
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       spec.Durable,
		Description:   ConsumerDescription,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     acks.policy(),
		AckWait:       ackWait,
		MaxDeliver:    -1, // never give up on a message: dropping one would lose an event
		// The default (1000) would cap every fetch at 1000 messages; the
		// source holds up to two batches unacknowledged (one being stored,
		// one filling) and fetches in flight (up to five, see
		// JetStreamSource.Run). With three fetches of headroom the filling
		// batch completes while the previous one is stored; the rest waits
		// for that batch's ack.
		MaxAckPending: max(2*batch+3*fetch, 20000),
		// The consumer's state (what it delivered, what is acknowledged)
		// lives in the server's memory, not in its store: the server wrote
		// it out about ten times a second, each time every message
		// delivered and not yet acknowledged (up to two batches), a tenth
		// of serve's CPU with single-event messages. The database's
		// checkpoint is what counts: every start, rewind and recreation
		// positions the consumer after it (Rewind), so a server restart
		// that loses the state loses nothing.
		MemoryStorage: true,
	}
	switch len(spec.FilterSubjects) {
	case 0:
	case 1:
		cfg.FilterSubject = spec.FilterSubjects[0]
	default:
		cfg.FilterSubjects = spec.FilterSubjects
	}
	if acks == AcksNone {
		cfg.MaxAckPending = 0 // nothing is pending acknowledgement
	}
	c, err := js.CreateOrUpdateConsumer(ctx, spec.Stream, cfg)
	if err != nil && (strings.Contains(err.Error(), "storage type can not be updated") || strings.Contains(err.Error(), "ack policy can not be updated")) {
		// A consumer of an earlier mcptrail (its state on disk, or another
		// ack policy: the stream's retention or the server changed): the
		// server cannot change it in place. Ours (by its description) is
		// replaced; the checkpoint tells where the new one starts.
		c, err = replaceConsumer(ctx, js, spec.Stream, cfg)
	}
	if err != nil {
		hint := ""
		if strings.Contains(err.Error(), "ack policy") {
			hint = fmt.Sprintf(" (the existing consumer has another ack policy: delete it with `nats consumer rm %s %s`; the checkpoint in the database prevents duplicates)", spec.Stream, spec.Durable)
		}
		return nil, fmt.Errorf("create or update consumer %s on stream %s: %w%s", spec.Durable, spec.Stream, err, hint)
	}
	return c, nil
}

// replaceConsumer deletes the durable consumer cfg names, if it is an
// mcptrail daemon's (ConsumerDescription), and creates it with cfg.
func replaceConsumer(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	old, err := js.Consumer(ctx, stream, cfg.Durable)
	if err != nil {
		return nil, fmt.Errorf("read consumer %s: %w", cfg.Durable, err)
	}
	if desc := old.CachedInfo().Config.Description; desc != ConsumerDescription {
		return nil, fmt.Errorf("consumer %s cannot be changed in place (its state on disk, or another ack policy than %s) and is not an mcptrail daemon's (its description is %q): give this daemon another nats.consumer, or delete it with `nats consumer rm %s %s`",
			cfg.Durable, acksOf(cfg.AckPolicy), desc, stream, cfg.Durable)
	}
	if err := js.DeleteConsumer(ctx, stream, cfg.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("replace consumer %s with one whose state is in memory and whose ack policy is %s: %w", cfg.Durable, acksOf(cfg.AckPolicy), err)
	}
	return js.CreateOrUpdateConsumer(ctx, stream, cfg)
}

// Rewind positions the consumer after both its ack floor and the
// checkpoint (the highest stream sequence stored; an AckNone consumer, whose
// ack floor is what it delivered, after the checkpoint alone, every time): what a previous run
// fetched and never acknowledged comes back at once instead of after the
// ack wait, while what it stored and never acknowledged (a crash between
// commit and ack), or what a consumer that lost its state in memory would
// deliver again from the stream's start, is not read again. Call it before
// the source fetches, and only when this process is the consumer's only
// user. It returns the sequence the consumer delivers from next, 0 when it
// needed no rewind. Servers without the reset API (before 2.14) keep the
// usual redelivery after the ack wait, and the source skips what the
// checkpoint covers.
func Rewind(ctx context.Context, js jetstream.JetStream, c jetstream.Consumer, checkpoint uint64) (uint64, error) {
	info, err := c.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("consumer info: %w", err)
	}
	floor := info.AckFloor.Stream
	if info.Config.AckPolicy == jetstream.AckNonePolicy {
		// Its ack floor is what it delivered, and nothing tells what it
		// delivered from what the source received: only the checkpoint
		// says what is stored, so it is always rewound to it. The reset
		// also restarts its delivery sequences at 1, which the source's
		// check for a lost last delivery counts on (lostTail).
		floor = 0
	} else if info.NumAckPending == 0 && floor >= checkpoint {
		return 0, nil
	}
	next := max(floor, checkpoint) + 1
	if _, err := js.ResetConsumerToSequence(ctx, info.Stream, info.Name, next); err != nil {
		after := fmt.Sprintf("after its ack floor %d and the checkpoint %d", info.AckFloor.Stream, checkpoint)
		if info.Config.AckPolicy == jetstream.AckNonePolicy {
			after = fmt.Sprintf("after the checkpoint %d", checkpoint) // its ack floor is only what it delivered
		}
		return 0, fmt.Errorf("reset consumer %s to stream sequence %d (%s): %w", info.Name, next, after, err)
	}
	return next, nil
}
