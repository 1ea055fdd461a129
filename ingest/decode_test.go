package ingest

import (
	"testing"

	"github.com/stretchr/testify/assert"
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
