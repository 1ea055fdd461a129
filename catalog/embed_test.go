package catalog

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBuiltin(t *testing.T) {
	assert.Equal(t, []string{ProxmoxServer}, BuiltinNames())
	doc, ok := Builtin(ProxmoxServer)
	require.True(t, ok)
	cat, err := Parse(doc, "builtin")
	require.NoError(t, err)
	assert.Equal(t, ProxmoxServer, cat.Server)
	assert.Len(t, cat.Tools, 286)
	_, ok = Builtin("nope")
	assert.False(t, ok)
}
