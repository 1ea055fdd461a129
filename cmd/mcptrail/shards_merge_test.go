package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/mcptrail/mcptrail/shardsvc"
)

// TestMergeShardOutputs: what cannot be merged is left out and named, and
// the rest is still one valid document.
func TestMergeShardOutputs(t *testing.T) {
	a := shardsvc.Shard{ID: "A1", Consumer: "shard-a"}
	b := shardsvc.Shard{ID: "B1", Consumer: "shard-b"}
	c := shardsvc.Shard{ID: "C1", Consumer: "shard-c"}

	out, err := mergeShardOutputs("csv", []shardOutput{
		{a, []byte("server,n\nalpha,\"1,000\"\n")},
		{b, []byte("server,calls\nbeta,7\n")},
		{c, []byte("server,n\n")},
	})
	assert.Equal(t, "shard,server,n\nshard-a,alpha,\"1,000\"\n", string(out))
	assert.ErrorContains(t, err, "shard shard-b (B1) answered with the columns [server calls], not [server n]: left out")

	out, err = mergeShardOutputs("json", []shardOutput{
		{a, []byte("[\n  {\"n\": 1},\n  {}\n]\n")},
		{b, []byte("{\"n\": 2}\n")},
		{c, []byte("[]\n")},
	})
	assert.Equal(t, "[\n  {\"shard\": \"shard-a\", \"n\": 1},\n  {\"shard\": \"shard-a\"}\n]\n", string(out))
	assert.ErrorContains(t, err, "shard shard-b (B1): its answer is no JSON list of objects: left out")

	out, err = mergeShardOutputs("json", []shardOutput{{c, []byte("[]\n")}})
	assert.NoError(t, err)
	assert.Equal(t, "[]\n", string(out))
}
