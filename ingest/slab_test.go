package ingest

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Lines share slabs and the decoder's strings alias them, so a line must
// stay as it was read for as long as it is held: every line read from a
// stream is still intact after all the lines after it, whether it fitted
// the slab in hand, moved to a new one part-way (read in fragments, the
// bufio buffer being smaller than the line), or was longer than the limit
// (its first limit+1 bytes kept, and the digest of all of it).
func TestSlabLinesStayIntact(t *testing.T) {
	const limit = 40
	rng := rand.New(rand.NewPCG(7, 7))
	var want []string
	var input strings.Builder
	for i := range 2000 {
		n := rng.IntN(3 * limit)
		b := make([]byte, n)
		for j := range b {
			b[j] = byte('a' + (i+j)%26)
		}
		want = append(want, string(b))
		input.Write(b)
		if i%7 == 0 {
			input.WriteString("\r") // CRLF endings lose their CR
		}
		input.WriteString("\n")
	}
	br := bufio.NewReaderSize(strings.NewReader(input.String()), 16)
	s := slab{size: 64}
	var got [][]byte
	var wholes []*Digest
	var total int
	for {
		line, n, whole, err := s.readLine(br, limit)
		total += n
		if errors.Is(err, io.EOF) {
			require.Empty(t, line)
			break
		}
		require.NoError(t, err)
		got = append(got, line)
		wholes = append(wholes, whole)
	}
	assert.Equal(t, input.Len(), total, "every byte is counted")
	require.Len(t, got, len(want))
	for i, w := range want {
		if len(w) <= limit {
			assert.Equal(t, w, string(got[i]), "line %d", i+1)
			assert.Nil(t, wholes[i], "line %d", i+1)
			continue
		}
		assert.Equal(t, w[:limit+1], string(got[i]), "line %d keeps its first limit+1 bytes", i+1)
		require.NotNil(t, wholes[i], "line %d", i+1)
		assert.Equal(t, Digest{Size: len(w), Sum: sha256.Sum256([]byte(w))}, *wholes[i], "line %d", i+1)
	}
}

// readLine outside a slab (the OTLP reader's) allocates for the line alone,
// not a whole slab per line.
func TestReadLineAllocatesTheLine(t *testing.T) {
	br := bufio.NewReader(strings.NewReader(`{"a":1}` + "\n"))
	line, _, _, err := readLine(br, 100)
	require.NoError(t, err)
	assert.Equal(t, `{"a":1}`, string(line))
	assert.Less(t, cap(line), 64)
}
