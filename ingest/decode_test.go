package ingest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
)

// isSubjectToken is checkSubject's fast path: wherever it answers true,
// SubjectToken must agree, and for every ASCII name it must answer what
// comparing with SubjectToken answers.
func TestIsSubjectTokenAgreesWithSubjectToken(t *testing.T) {
	servers := []string{"proxmox-mcp", "pve", "a.b", "a*b>c", "tab\tname", "line\r\nend", "sp ace", "", "unknown",
		"prox\u00e9", "\xffbad", "a_b", "_"}
	tokens := []string{"proxmox-mcp", "pve", "a_b", "a_b_c", "tab_name", "line__end", "sp_ace", "", "unknown",
		"prox\u00e9", "\ufffdbad", "\xffbad", "a.b", "ab", "pvf", "proxmox-mc", "_"}
	for _, server := range servers {
		for _, token := range tokens {
			want := token == SubjectToken(server)
			got := isSubjectToken(token, server)
			if got {
				assert.True(t, want, "isSubjectToken(%q, %q) is true, SubjectToken gives %q", token, server, SubjectToken(server))
			}
			if isASCII(server) && server != "" {
				assert.Equal(t, want, got, "isSubjectToken(%q, %q)", token, server)
			}
			assert.Equal(t, want, checkSubject("mcp.audit."+token, server) == nil, "checkSubject(%q, %q)", token, server)
		}
	}
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// go test ./ingest -run '^$' -bench CheckSubject: the check every event
// that serve stores passes through.
func BenchmarkCheckSubject(b *testing.B) {
	for b.Loop() {
		if err := checkSubject("mcp.audit.proxmox-mcp", "proxmox-mcp"); err != nil {
			b.Fatal(err)
		}
	}
}

// A rejected payload keeps no argument value at rest however it is shaped:
// an object of no known format keeps its keys alone, a value sent alone
// (a line of an event printed over several lines) nothing, a CloudEvent's
// data that does not parse is redacted whole.
func TestDeadLettersKeepNoValueOfWhatCouldBeArguments(t *testing.T) {
	lines := []string{
		`{"name": "DB_PASSWORD", "value": "hunter2"}`,
		`"sk-live-hunter2"`,
		`{"specversion":"1.0","id":"1","source":"g","type":"t","data":"{\"server\":\"s\",\"args\":{\"password\":\"hunter2\"}"}`,
	}
	var msgs []Message
	for i, l := range lines {
		msgs = append(msgs, Message{Data: []byte(l), Source: "f", Line: int64(i + 1)})
	}
	events, dead, _ := DecodeMessages(context.Background(), msgs, audit.Options{}, 1)
	require.Empty(t, events)
	require.Len(t, dead, 3)
	for _, d := range dead {
		assert.NotContains(t, string(d.Raw), "hunter2", "line %d (%s)", d.Line, d.Reason)
	}
	assert.Equal(t, audit.ReasonUnknownFormat, dead[0].Reason)
	assert.Equal(t, `{"name":"[redacted]","value":"[redacted]"}`, string(dead[0].Raw), "its shape kept")
}
