package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDemoPublishesOnTheConfiguredSubject: `demo` runs the daemon with the
// configuration's nats.subject, whose gateway user may publish there
// alone; the demo's gateway publishes there too and gets to its PR folder.
func TestDemoPublishesOnTheConfiguredSubject(t *testing.T) {
	dir := t.TempDir()
	out, code, errOut := runCLI(t, dir, []string{"MCPTRAIL_NATS_SUBJECT=gw.audit.>"}, []string{"demo", "--dir", dir, "--days", "1"})
	require.Zero(t, code, out+errOut)
	assert.Contains(t, out, "PR folder:")
	_, err := os.Stat(filepath.Join(dir, "pr", "PR.md"))
	assert.NoError(t, err)
}
