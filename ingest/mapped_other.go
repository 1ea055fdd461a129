//go:build !(linux || darwin || freebsd)

package ingest

import "os"

// mapping is not used here: files are read as streams.
type mapping struct{ data []byte }

func mapFile(*os.File, int64) (*mapping, error) { return nil, nil }
func (m *mapping) release(from, to int) int     { return from }
func (m *mapping) close()                       {}
