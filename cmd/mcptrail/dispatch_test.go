package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/api"
)

// The files a daemon sends for --out are written inside it under their
// own, clean names: a name that climbs out and back in ("a/../b/c") would
// have made the report's replacement of its server's folder remove --out
// itself.
func TestOutputFilesStayInTheirFolder(t *testing.T) {
	out := t.TempDir()
	keep := filepath.Join(out, "keep.txt")
	require.NoError(t, os.WriteFile(keep, []byte("mine"), 0o600))
	write := (&app{}).outWriter(&api.ReportRequest{Out: out})
	for _, name := range []string{"a/../b/c.json", "./a/b/c.json", "../x.json", "a//b/c.json", "/etc/x"} {
		assert.Error(t, write(api.File{Name: name, Content: []byte("{}")}), name)
		assert.FileExists(t, keep, name)
	}
	require.NoError(t, write(api.File{Name: "proxmox-mcp/2026-11-30/report.json", Content: []byte("{}")}))
	assert.FileExists(t, filepath.Join(out, "proxmox-mcp", "2026-11-30", "report.json"))
	assert.FileExists(t, keep)
}
