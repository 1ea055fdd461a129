package audit

import (
	"bufio"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const samplesDir = "../testdata/samples"

// sampleLines reads a JSONL file as raw lines (no size limit of its own, so
// that the too_large line reaches Decode).
func sampleLines(t *testing.T, name string) [][]byte {
	t.Helper()
	f, err := os.Open(filepath.Join(samplesDir, name))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	var lines [][]byte
	for sc.Scan() {
		lines = append(lines, append([]byte(nil), sc.Bytes()...))
	}
	require.NoError(t, sc.Err())
	return lines
}

func TestSamples(t *testing.T) {
	for _, tc := range []struct {
		file                     string
		format                   Format
		events, skipped, startup int
		decisions                map[Decision]int
	}{
		{"native.jsonl", FormatNative, 11, 0, 0, map[Decision]int{Allowed: 7, RateLimited: 1, ApprovalRequired: 1, Hidden: 1, Denied: 1}},
		{"cloudevents.jsonl", FormatCloudEvents, 5, 0, 0, map[Decision]int{Allowed: 4, Denied: 1}},
		{"intercept.jsonl", FormatIntercept, 8, 3, 2, map[Decision]int{Allowed: 4, Denied: 2, RateLimited: 1, Hidden: 1}},
		{"docker.jsonl", FormatDocker, 4, 2, 0, map[Decision]int{Allowed: 2, Denied: 2}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			for _, f := range []Format{FormatAuto, tc.format} {
				opts := Options{Format: f}
				if tc.format == FormatIntercept {
					// One instance's startup line names a URL, no valid
					// server name (TestSampleInterceptServers).
					opts.Server = "proxmox-mcp"
				}
				var r InterceptServers
				var events, skipped, startup int
				decisions := map[Decision]int{}
				ids := map[string]bool{}
				for i, line := range sampleLines(t, tc.file) {
					res, err := Decode(line, opts)
					require.NoError(t, err, "line %d", i+1)
					require.NoError(t, r.Apply(&res, opts), "line %d", i+1)
					assert.Equal(t, tc.format, res.Format, "line %d", i+1)
					switch res.Kind {
					case KindEvent:
						events++
						decisions[res.Event.Decision]++
						require.NoError(t, res.Event.Validate(opts), "line %d", i+1)
						assert.False(t, ids[res.Event.ID], "duplicate id on line %d", i+1)
						ids[res.Event.ID] = true
						assert.Equal(t, 2026, res.Event.TS.Year())
						assert.Equal(t, 11, int(res.Event.TS.Month()))
					case KindSkipped:
						skipped++
					case KindInterceptStartup:
						startup++
					}
				}
				assert.Equal(t, tc.events, events)
				assert.Equal(t, tc.skipped, skipped)
				assert.Equal(t, tc.startup, startup)
				assert.Equal(t, tc.decisions, decisions)
			}
		})
	}
}

func TestSampleInterceptServers(t *testing.T) {
	var r InterceptServers
	servers := map[string]int{}
	var rejected []string
	for _, line := range sampleLines(t, "intercept.jsonl") {
		res, err := Decode(line, Options{})
		require.NoError(t, err)
		if err := r.Apply(&res, Options{}); err != nil {
			rejected = append(rejected, err.Error())
			continue
		}
		if res.Kind == KindEvent {
			servers[res.Event.Server]++
		}
	}
	assert.Equal(t, map[string]int{"npx": 6}, servers)
	want := `bad_field: the startup line of Intercept instance "c07e55d2" names the server "https://pve.example.internal/mcp": ` +
		`a server name cannot hold a path separator (/ or \); pass --server NAME`
	assert.Equal(t, []string{want, want}, rejected, "a URL is no server name")
}

// TestSampleBad: bad.jsonl holds one line per rejection reason, in this order.
func TestSampleBad(t *testing.T) {
	want := []string{
		ReasonNotUTF8, ReasonMalformedJSON, ReasonUnknownFormat, ReasonMissingTS, ReasonBadTS,
		ReasonMissingServer, ReasonMissingTool, ReasonBadDecision, ReasonFieldTooLong, ReasonBadField,
		ReasonTooLarge,
	}
	lines := sampleLines(t, "bad.jsonl")
	require.Len(t, lines, len(want))
	seen := map[string]bool{}
	for i, line := range lines {
		_, err := Decode(line, Options{})
		assert.Equal(t, want[i], ReasonOf(err), "line %d: %v", i+1, err)
		seen[ReasonOf(err)] = true
	}
	for _, r := range Reasons {
		if r == ReasonSubjectMismatch {
			continue // ingest's check of a NATS subject, not the payload's
		}
		assert.True(t, seen[r], "bad.jsonl has no line for %s", r)
	}
}

// TestSampleRoundTrip: every sample event survives json.Marshal and a native
// decode unchanged, the path simulated traffic takes.
func TestSampleRoundTrip(t *testing.T) {
	for _, file := range []string{"native.jsonl", "cloudevents.jsonl", "intercept.jsonl", "docker.jsonl"} {
		for _, opts := range []Options{{Server: "proxmox-mcp"}, {Server: "proxmox-mcp", StoreArgs: true}} {
			for _, line := range sampleLines(t, file) {
				res, err := Decode(line, opts)
				require.NoError(t, err)
				if res.Kind == KindEvent {
					checkRoundTrip(t, res.Event, opts)
				}
			}
		}
	}
}
