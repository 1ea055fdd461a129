package audit

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func argsLine(id, args string) []byte {
	return []byte(`{"id":"` + id + `","ts":"2026-11-03T09:00:00Z","server":"proxmox-mcp","tool":"get_vm_status",` +
		`"decision":"allowed","args":` + args + `}`)
}

// decodeTwice decodes line twice: a text is kept on its second miss.
func decodeTwice(t *testing.T, line func() []byte, opts Options) Result {
	t.Helper()
	_, err := Decode(line(), opts)
	require.NoError(t, err)
	res, err := Decode(line(), opts)
	require.NoError(t, err)
	return res
}

// A text is kept once it missed twice in its slot, and its repeats then
// decode from the cache exactly as the first did.
func TestArgsCacheRepeatsDecodeAlike(t *testing.T) {
	for _, args := range []string{
		`{"node":"pve3","vmid":149}`,
		`{"vmid":149,"node":"pve3"}`,         // reordered by the canonical form
		`{ "node" : "pve3" , "vmid" : 149 }`, // another text, the same canonical form
		`{"cmd":"a<b&c","node":"n","node":"m"}`,
		`{"n":{"z":1,"a":[1,2,{"y":null,"b":true}]}}`,
		`{}`,
	} {
		t.Run(args, func(t *testing.T) {
			line := func() []byte { return argsLine("a", args) }
			first, err := Decode(line(), Options{StoreArgs: true})
			require.NoError(t, err)
			hit, _ := cachedArgs(args)
			require.Nil(t, hit, "a text is not kept on its first miss")
			second, err := Decode(line(), Options{StoreArgs: true})
			require.NoError(t, err)
			hit, _ = cachedArgs(args)
			require.NotNil(t, hit, "a text is kept on its second miss")
			again, err := Decode(line(), Options{StoreArgs: true})
			require.NoError(t, err)
			assert.Equal(t, first, second)
			assert.Equal(t, first, again)
			if len(hit.keys) > 0 {
				assert.Same(t, &hit.keys[0], &again.Event.ArgKeys[0], "the repeat's keys come from the cache")
			}
			canonical, hash, keys, err := CanonicalArgsKeys([]byte(args))
			require.NoError(t, err)
			assert.Equal(t, json.RawMessage(canonical), again.Event.Args)
			assert.Equal(t, hash, again.Event.ArgsHash)
			assert.Equal(t, keys, again.Event.ArgKeys)
		})
	}
}

// With Borrow a decode's strings alias its payload; what the cache keeps
// must not, or a payload buffer reused for the next message would rewrite
// the keys of every later repeat.
func TestArgsCacheOwnsItsStrings(t *testing.T) {
	args := `{"node_borrowed":"pve1","vmid_borrowed":7}`
	var last []byte
	first := decodeTwice(t, func() []byte { last = argsLine("b", args); return last }, Options{Borrow: true})
	require.Equal(t, []string{"node_borrowed", "vmid_borrowed"}, first.Event.ArgKeys)
	for i := range last {
		last[i] = 'x' // the buffer of the decode that kept the text, reused
	}
	again, err := Decode(argsLine("c", args), Options{Borrow: true})
	require.NoError(t, err)
	assert.Equal(t, []string{"node_borrowed", "vmid_borrowed"}, again.Event.ArgKeys)
	assert.NotEmpty(t, again.Event.ArgsHash)
	assert.Equal(t, first.Event.ArgsHash, again.Event.ArgsHash)
}

// Each event owns its Args: writing one event's bytes changes no other
// event's, nor the cache.
func TestArgsCacheGivesEachEventItsArgs(t *testing.T) {
	args := `{"own":"args"}`
	a := decodeTwice(t, func() []byte { return argsLine("d", args) }, Options{StoreArgs: true})
	b, err := Decode(argsLine("e", args), Options{StoreArgs: true})
	require.NoError(t, err)
	for i := range b.Event.Args {
		b.Event.Args[i] = 'x'
	}
	c, err := Decode(argsLine("f", args), Options{StoreArgs: true})
	require.NoError(t, err)
	assert.Equal(t, json.RawMessage(args), a.Event.Args)
	assert.Equal(t, json.RawMessage(args), c.Event.Args)
}

// Texts that share a slot replace each other and never answer for one
// another; texts over argsCacheMaxRaw are not kept.
func TestArgsCacheCollisionsAndLongTexts(t *testing.T) {
	want := map[string]string{}
	for i := range 3 * argsCacheSlots {
		args := fmt.Sprintf(`{"vmid":%d}`, i)
		for range 2 { // kept on the second miss, replacing others
			res, err := Decode(argsLine("g", args), Options{})
			require.NoError(t, err)
			_, hash, _, err := CanonicalArgsKeys([]byte(args))
			require.NoError(t, err)
			require.Equal(t, hash, res.Event.ArgsHash, args)
			want[args] = hash
		}
	}
	hits := 0
	for args, hash := range want { // many now miss, some hit: all are right
		if hit, _ := cachedArgs(args); hit != nil {
			hits++
		}
		res, err := Decode(argsLine("h", args), Options{})
		require.NoError(t, err)
		require.Equal(t, hash, res.Event.ArgsHash, args)
	}
	assert.Positive(t, hits)
	long := fmt.Sprintf(`{"blob":"%0*d"}`, argsCacheMaxRaw, 0)
	decodeTwice(t, func() []byte { return argsLine("i", long) }, Options{})
	hit, _ := cachedArgs(long)
	assert.Nil(t, hit)
}
