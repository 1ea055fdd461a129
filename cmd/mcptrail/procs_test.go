package main

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
)

// extraProcs adds Ps to Go's own choice, unless GOMAXPROCS is set.
func TestExtraProcs(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(before)
	t.Setenv("GOMAXPROCS", "")
	extraProcs(2)
	assert.Equal(t, before+2, runtime.GOMAXPROCS(0))

	runtime.GOMAXPROCS(before)
	t.Setenv("GOMAXPROCS", "3")
	extraProcs(2)
	assert.Equal(t, before, runtime.GOMAXPROCS(0), "GOMAXPROCS decides")
}
