package simulate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/catalog"
)

func TestScenarios(t *testing.T) {
	list := Scenarios()
	names := make([]string, len(list))
	for i, s := range list {
		names[i] = s.Name
		assert.NotEmpty(t, s.Description, s.Name)
	}
	assert.Equal(t, []string{"loops", "proxmox", "small"}, names)
}

func TestGenerateRejectsBadOptions(t *testing.T) {
	noop := func(audit.Event) error { return nil }
	tests := []struct {
		name string
		opts Options
		emit func(audit.Event) error
		want []string
	}{
		{"unknown scenario", Options{Scenario: "nope", Now: testNow}, noop, []string{`"nope"`, "loops, proxmox, small"}},
		{"no now", Options{}, noop, []string{"Now is required"}},
		{"negative count", Options{Count: -1, Now: testNow}, noop, []string{"Count", "-1"}},
		{"negative duration", Options{Duration: -time.Hour, Now: testNow}, noop, []string{"Duration"}},
		{"nil emit", Options{Now: testNow}, nil, []string{"emit"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Generate(context.Background(), tt.opts, tt.emit)
			require.Error(t, err)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestGenerateStopsOnEmitErrorAndCancel(t *testing.T) {
	boom := errors.New("boom")
	n := 0
	st, err := Generate(context.Background(), Options{Now: testNow}, func(audit.Event) error {
		if n++; n == 10 {
			return boom
		}
		return nil
	})
	require.ErrorIs(t, err, boom)
	assert.Contains(t, err.Error(), "sim-0-10")
	assert.Equal(t, 10, st.Events)

	ctx, cancel := context.WithCancel(context.Background())
	st, err = Generate(ctx, Options{Count: 100000, Now: testNow}, func(audit.Event) error {
		cancel()
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	assert.Less(t, st.Events, 100000)
}

// digest hashes the JSON of every event: byte-identical streams, equal digests.
func digest(t *testing.T, opts Options) (string, int) {
	t.Helper()
	d, n, err := digestOf(opts)
	require.NoError(t, err)
	return d, n
}

func digestOf(opts Options) (string, int, error) {
	h := sha256.New()
	enc := json.NewEncoder(h)
	st, err := Generate(context.Background(), opts, func(e audit.Event) error { return enc.Encode(e) })
	return hex.EncodeToString(h.Sum(nil)), st.Events, err
}

func TestDeterminism(t *testing.T) {
	for _, tt := range []Options{
		{Scenario: "proxmox", Seed: 1, Duration: 4 * day},
		{Scenario: "small", Seed: 42},
		{Scenario: "loops", Seed: 7},
		{Scenario: "proxmox", Seed: 3, Count: 20000},
		{Scenario: "small", Seed: 5, Duration: 6 * time.Hour},
	} {
		tt.Now = testNow
		t.Run(fmt.Sprintf("%s-%d-%d-%s", tt.Scenario, tt.Seed, tt.Count, tt.Duration), func(t *testing.T) {
			a, n := digest(t, tt)
			b, _ := digest(t, tt)
			assert.Equal(t, a, b, "same options, same bytes")
			require.Positive(t, n)
			other := tt
			other.Seed++
			c, _ := digest(t, other)
			assert.NotEqual(t, a, c, "another seed, other traffic")
		})
	}
}

func TestCountIsExact(t *testing.T) {
	for _, sc := range []string{"proxmox", "small", "loops"} {
		for _, n := range []int{1, 2, 17, 500, 4321, 60000} {
			t.Run(fmt.Sprintf("%s/%d", sc, n), func(t *testing.T) {
				got := 0
				st, err := Generate(context.Background(), Options{Scenario: sc, Seed: int64(n), Count: n, Now: testNow},
					func(audit.Event) error { got++; return nil })
				require.NoError(t, err)
				assert.Equal(t, n, got)
				assert.Equal(t, n, st.Events)
			})
		}
	}
	// A large count fills the whole default span, up to Now.
	_, st := collect(t, Options{Count: 100000, Now: testNow})
	assert.Less(t, st.From.Sub(testNow.Add(-14*day)), 2*time.Hour)
	assert.Less(t, testNow.Sub(st.To), 10*time.Minute)
	// So does a count with an explicit duration.
	_, st = collect(t, Options{Count: 5000, Duration: 48 * time.Hour, Now: testNow})
	assert.Equal(t, 5000, st.Events)
	assert.False(t, st.From.Before(testNow.Add(-48*time.Hour)))
}

// TestEventsAreWellFormed checks ordering, bounds and every field, for each
// scenario and mode.
func TestEventsAreWellFormed(t *testing.T) {
	now := testNow.Add(123456789 * time.Nanosecond) // not on a millisecond
	for _, tt := range []Options{
		{Scenario: "proxmox", Seed: 11},
		{Scenario: "small", Seed: 12},
		{Scenario: "loops", Seed: 13},
		{Scenario: "proxmox", Seed: 14, Count: 30000},
		{Scenario: "proxmox", Seed: 15, Duration: 36*time.Hour + 500*time.Microsecond},
	} {
		tt.Now = now
		t.Run(fmt.Sprintf("%s-%d-%s", tt.Scenario, tt.Count, tt.Duration), func(t *testing.T) {
			evs, st := collect(t, tt)
			require.NotEmpty(t, evs)
			span := tt.Duration
			if span == 0 {
				span = map[string]time.Duration{"proxmox": 14 * day, "small": 2 * day, "loops": 30 * day}[tt.Scenario]
			}
			from := now.Add(-span)
			ids := make(map[string]bool, len(evs))
			c := newEventChecker()
			decisions := map[audit.Decision]int{}
			for i, e := range evs {
				if i > 0 && e.TS.Before(evs[i-1].TS) {
					t.Fatalf("event %s goes back in time: %s < %s", e.ID, e.TS, evs[i-1].TS)
				}
				if e.TS.After(now) || e.TS.Before(from) {
					t.Fatalf("event %s at %s is outside [%s, %s]", e.ID, e.TS, from, now)
				}
				if ids[e.ID] {
					t.Fatalf("duplicate id %s", e.ID)
				}
				ids[e.ID] = true
				decisions[e.Decision]++
				c.check(t, e)
			}
			assert.Equal(t, len(evs), st.Events)
			assert.Equal(t, len(c.sessions), st.Sessions)
			assert.Equal(t, decisions, st.ByDecision)
			assert.Equal(t, evs[0].TS, st.From)
			assert.Equal(t, evs[len(evs)-1].TS, st.To)
			assert.Equal(t, fmt.Sprintf("sim-%d-1", tt.Seed), evs[0].ID)
		})
	}
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// eventChecker checks events; what is shared by many events (arguments,
// session identity) is checked once.
type eventChecker struct {
	args     map[string]bool
	sessions map[string]string // session -> grant/agent/gateway
}

func newEventChecker() *eventChecker {
	return &eventChecker{args: map[string]bool{}, sessions: map[string]string{}}
}

func (c *eventChecker) check(t *testing.T, e audit.Event) {
	t.Helper()
	fail := func(format string, a ...any) {
		t.Helper()
		t.Fatalf("%s (%s %s): %s", e.ID, e.Tool, e.Decision, fmt.Sprintf(format, a...))
	}
	switch {
	case e.Server != "proxmox-mcp" || e.Method != "tools/call" || !e.Decision.Valid() || e.Tool == "":
		fail("server %q method %q decision %q", e.Server, e.Method, e.Decision)
	case e.Grant == "" || e.Agent == "" || e.RequestID == "" || !slices.Contains(gateways, e.Gateway):
		fail("grant %q agent %q request %q gateway %q", e.Grant, e.Agent, e.RequestID, e.Gateway)
	case e.TS.Location() != time.UTC || e.TS.Nanosecond()%int(time.Millisecond) != 0:
		fail("ts %s is not a UTC millisecond", e.TS)
	}
	who := e.Grant + "/" + e.Agent + "/" + e.Gateway
	if prev, ok := c.sessions[e.Session]; !ok {
		if !uuidRE.MatchString(e.Session) {
			fail("session %q is not uuid-like", e.Session)
		}
		c.sessions[e.Session] = who
	} else if prev != who {
		fail("session %s changes identity: %s then %s", e.Session, prev, who)
	}
	if e.Decision == audit.Allowed {
		if (e.Status != "ok" && e.Status != "error") || e.LatencyMS == nil || *e.LatencyMS <= 0 || e.Rule != "" {
			fail("allowed call: status %q latency %v rule %q", e.Status, e.LatencyMS, e.Rule)
		}
		if e.ErrorCode != nil && e.Status != "error" {
			fail("error code on a successful call")
		}
	} else if e.Status != "" || e.LatencyMS != nil || e.ErrorCode != nil || e.Rule == "" || e.Reason == "" {
		fail("refused call: status %q latency %v code %v rule %q reason %q", e.Status, e.LatencyMS, e.ErrorCode, e.Rule, e.Reason)
	}
	if c.args[e.ArgsHash] {
		return
	}
	c.args[e.ArgsHash] = true
	sum := sha256.Sum256(e.Args)
	require.Equal(t, "sha256:"+hex.EncodeToString(sum[:]), e.ArgsHash)
	var args map[string]any
	require.NoError(t, json.Unmarshal(e.Args, &args))
	canon, err := json.Marshal(args)
	require.NoError(t, err)
	require.Equal(t, string(canon), string(e.Args), "args are json.Marshal of a map")
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(keys) == 0 {
		require.Empty(t, e.ArgKeys)
	} else {
		require.Equal(t, keys, e.ArgKeys)
	}
}

// TestEventsOutliveTheGenerator: events a caller keeps never change, although
// the generator recycles its buffers.
func TestEventsOutliveTheGenerator(t *testing.T) {
	evs, _ := collect(t, Options{Scenario: "small", Seed: 9, Now: testNow})
	before, err := json.Marshal(evs)
	require.NoError(t, err)
	_, _ = collect(t, Options{Scenario: "small", Seed: 10, Now: testNow})
	after, err := json.Marshal(evs)
	require.NoError(t, err)
	assert.Equal(t, string(before), string(after))
}

func TestArgsEncodingMatchesEncodingJSON(t *testing.T) {
	c := newArgCache()
	tests := [][]arg{
		{},
		{str("node", "pve1"), num("vmid", 104)},
		{num("vmid", -3), str("node", "pve1")}, // unsorted on purpose
		{boolean("full", true), boolean("purge", false), num("big", 1<<53)},
		{str("command", `echo "<a&b>" \ done`), str("tab", "a\tb\n"), str("uni", "héllo \u2028 ✓"), str("bad", "\xff")},
	}
	for i, kv := range tests {
		m := map[string]any{}
		for _, a := range kv {
			switch a.kind {
			case 's':
				m[a.key] = a.s
			case 'i':
				m[a.key] = a.i
			case 'b':
				m[a.key] = a.i != 0
			}
		}
		want, err := json.Marshal(m)
		require.NoError(t, err)
		got := c.get(kv...)
		assert.Equal(t, string(want), string(got.json), "case %d", i)
		assert.Same(t, got, c.get(kv...), "interned")
	}
}

func TestToolsExistInCatalog(t *testing.T) {
	known, err := catalogTools()
	require.NoError(t, err)
	require.Len(t, known, 286)
	for name := range tools {
		assert.True(t, known[name], "%s is not in the Proxmox catalog", name)
	}
	assert.False(t, known[unknownTool])

	schemas := catalogSchemas(t)
	seen := map[string]bool{}
	for _, sc := range []string{"proxmox", "small", "loops"} {
		evs, _ := collect(t, Options{Scenario: sc, Seed: 21, Now: testNow})
		for _, e := range evs {
			if seen[e.Tool+e.ArgsHash] {
				continue
			}
			seen[e.Tool+e.ArgsHash] = true
			if e.Tool == unknownTool {
				require.Equal(t, audit.Denied, e.Decision)
				continue
			}
			require.True(t, known[e.Tool], "%s: %s is not in the catalog", sc, e.Tool)
			_, listed := tools[e.Tool]
			require.True(t, listed, "%s is called but not in the tools table", e.Tool)
			checkArgsAgainstSchema(t, e, schemas[e.Tool])
		}
	}
}

type schema struct {
	Properties map[string]struct {
		Type string `json:"type"`
	} `json:"properties"`
	Required []string `json:"required"`
}

func catalogSchemas(t *testing.T) map[string]schema {
	t.Helper()
	var doc struct {
		Tools []struct {
			Name        string `json:"name"`
			InputSchema schema `json:"inputSchema"`
		} `json:"tools"`
	}
	require.NoError(t, json.Unmarshal(catalog.ProxmoxToolsJSON(), &doc))
	out := map[string]schema{}
	for _, tl := range doc.Tools {
		out[tl.Name] = tl.InputSchema
	}
	return out
}

// checkArgsAgainstSchema: the simulated agents send what the tool accepts.
func checkArgsAgainstSchema(t *testing.T, e audit.Event, s schema) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(e.Args)))
	dec.UseNumber()
	var args map[string]any
	require.NoError(t, dec.Decode(&args))
	for _, r := range s.Required {
		require.Contains(t, args, r, "%s: required argument %s missing", e.Tool, r)
	}
	for k, v := range args {
		p, ok := s.Properties[k]
		require.True(t, ok, "%s: unknown argument %s", e.Tool, k)
		switch p.Type {
		case "string":
			require.IsType(t, "", v, "%s.%s", e.Tool, k)
		case "integer":
			n, ok := v.(json.Number)
			require.True(t, ok, "%s.%s", e.Tool, k)
			_, err := n.Int64()
			require.NoError(t, err, "%s.%s", e.Tool, k)
		case "boolean":
			require.IsType(t, true, v, "%s.%s", e.Tool, k)
		}
	}
}

func TestWindowBoundsInMilliseconds(t *testing.T) {
	for _, tt := range []struct {
		now      time.Time
		span     time.Duration
		from, to int64 // Unix ms
	}{
		{time.UnixMilli(10_000), 4 * time.Second, 6_000, 10_000},
		{time.Unix(10, 999_999), 4 * time.Second, 6_001, 10_000},
		{time.Unix(10, 999_999), 4*time.Second + 999_999, 6_000, 10_000},
		{time.Unix(10, 1_500_000), 4*time.Second + 200_000, 6_002, 10_001},
	} {
		g, err := newGen(proxmoxScenario, Options{Now: tt.now, Duration: tt.span})
		require.NoError(t, err)
		assert.Equal(t, tt.from, g.start, "%s - %s", tt.now, tt.span)
		assert.Equal(t, tt.to, g.end, "%s", tt.now)
		assert.False(t, time.UnixMilli(g.start).Before(tt.now.Add(-tt.span)))
		assert.False(t, time.UnixMilli(g.end).After(tt.now))
	}
}
