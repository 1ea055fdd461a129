package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/shardsvc"
)

// A fan-out in a machine format prints one document, not sections under
// header lines, so that a program can read it as it reads one daemon's
// answer: the shards' rows in one CSV or one JSON array, each row naming its
// shard.

// shardOutput is what one shard printed, in the request's format.
type shardOutput struct {
	shard  shardsvc.Shard
	stdout []byte
}

// fanOutFormat is the machine format a fan-out merges ("json", "csv"), or ""
// for the formats people read, which keep one section per shard.
func fanOutFormat(req api.Request) string {
	var format string
	switch r := req.(type) {
	case *api.QueryRequest:
		format = r.Format
	case *api.ReportRequest:
		format = r.Format
	case *api.PoliciesRequest:
		format = r.Format
	case *api.SuppressionsRequest:
		format = r.Format
	}
	if format == "json" || format == "csv" {
		return format
	}
	return ""
}

// mergeShardOutputs merges the shards' answers in format.
func mergeShardOutputs(format string, outs []shardOutput) ([]byte, error) {
	if format == "csv" {
		return mergeShardCSV(outs)
	}
	return mergeShardJSON(outs)
}

// mergeShardCSV writes the shards' CSV tables as one: a first column shard
// (the shard's consumer name), then the shards' own columns. A shard whose
// columns differ from the first shard's is left out and named in the error.
func mergeShardCSV(outs []shardOutput) ([]byte, error) {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	var header []string
	var errs []error
	for _, o := range outs {
		records, err := csv.NewReader(bytes.NewReader(o.stdout)).ReadAll()
		if err != nil {
			errs = append(errs, fmt.Errorf("shard %s: its CSV does not parse: %w", o.shard.Name(), err))
			continue
		}
		if len(records) == 0 {
			continue
		}
		if header == nil {
			header = records[0]
			if err := w.Write(append([]string{"shard"}, header...)); err != nil {
				return nil, err
			}
		} else if !slices.Equal(header, records[0]) {
			errs = append(errs, fmt.Errorf("shard %s answered with the columns %v, not %v: left out", o.shard.Name(), records[0], header))
			continue
		}
		for _, rec := range records[1:] {
			if err := w.Write(append([]string{o.shard.Consumer}, rec...)); err != nil {
				return nil, err
			}
		}
	}
	w.Flush()
	return buf.Bytes(), errors.Join(errs...)
}

// mergeShardJSON writes the shards' JSON answers, each a list of objects
// (query rows, reports, policies, suppressions), as one list, each object
// with "shard" first and otherwise laid out as the shard wrote it.
func mergeShardJSON(outs []shardOutput) ([]byte, error) {
	var items []string
	var errs []error
	for _, o := range outs {
		var list []json.RawMessage
		if err := json.Unmarshal(o.stdout, &list); err != nil || !allObjects(list) {
			errs = append(errs, fmt.Errorf("shard %s: its answer is no JSON list of objects: left out", o.shard.Name()))
			continue
		}
		shard, _ := json.Marshal(o.shard.Consumer)
		for _, obj := range list {
			items = append(items, withShard(obj, string(shard)))
		}
	}
	if len(items) == 0 {
		return []byte("[]\n"), errors.Join(errs...)
	}
	var buf bytes.Buffer
	buf.WriteString("[\n")
	for i, it := range items {
		buf.WriteString("  " + it)
		if i < len(items)-1 {
			buf.WriteString(",")
		}
		buf.WriteString("\n")
	}
	buf.WriteString("]\n")
	return buf.Bytes(), errors.Join(errs...)
}

// withShard puts "shard" first in the JSON object obj: on the object's first
// line when it is written on one line, else on a line of its own indented
// as the object's first key.
func withShard(obj json.RawMessage, shard string) string {
	body := bytes.TrimSpace(obj)[1:] // after '{'
	rest := bytes.TrimLeft(body, " \t\r\n")
	ws := string(body[:len(body)-len(rest)])
	switch {
	case len(rest) > 0 && rest[0] == '}':
		return `{"shard": ` + shard + string(rest)
	case strings.Contains(ws, "\n"):
		return `{` + ws + `"shard": ` + shard + `,` + ws + string(rest)
	default:
		return `{"shard": ` + shard + `, ` + string(rest)
	}
}

func allObjects(list []json.RawMessage) bool {
	for _, m := range list {
		if t := bytes.TrimSpace(m); len(t) == 0 || t[0] != '{' {
			return false
		}
	}
	return true
}
