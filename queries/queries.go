// Package queries holds mcptrail's named SQL queries over the call history.
// Each is a .sql file embedded at build time whose header comment gives its
// name, description and parameters:
//
//	-- name: calls_by_tool
//	-- description: Calls per tool in the window ...
//	-- param: server string = "" : only this MCP server (empty: every server)
//	-- param: since duration = 30d : how far back from now
//
// Parameters are always bound ($name), never pasted into the SQL. Every query
// may also use $now, the reference time (--now, or the clock).
package queries

import (
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mcptrail/mcptrail/internal/duration"
)

//go:embed *.sql
var files embed.FS

// Param is one declared parameter.
type Param struct {
	Name        string
	Type        string // string, int or duration
	Default     string
	Description string
}

// Query is one named query.
type Query struct {
	Name        string
	Description string
	Params      []Param
	SQL         string
}

// All returns every named query sorted by name.
func All() ([]Query, error) {
	entries, err := fs.Glob(files, "*.sql")
	if err != nil {
		return nil, err
	}
	out := make([]Query, 0, len(entries))
	for _, e := range entries {
		data, err := files.ReadFile(e)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", e, err)
		}
		q, err := Parse(string(data))
		if err != nil {
			return nil, fmt.Errorf("queries/%s: %w", e, err)
		}
		if q.Name+".sql" != e {
			return nil, fmt.Errorf("queries/%s: name %q must match the file name", e, q.Name)
		}
		out = append(out, q)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Get returns the query called name, or an error listing the names.
func Get(name string) (Query, error) {
	all, err := All()
	if err != nil {
		return Query{}, err
	}
	names := make([]string, len(all))
	for i, q := range all {
		if q.Name == name {
			return q, nil
		}
		names[i] = q.Name
	}
	return Query{}, fmt.Errorf("unknown query %q: the named queries are %s (mcptrail queries lists them)", name, strings.Join(names, ", "))
}

// Parse reads a query file's header and body.
func Parse(text string) (Query, error) {
	var q Query
	var body []string
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		key, val, ok := strings.Cut(strings.TrimPrefix(trimmed, "--"), ":")
		if !strings.HasPrefix(trimmed, "--") || !ok {
			body = append(body, line)
			continue
		}
		val = strings.TrimSpace(val)
		switch strings.TrimSpace(key) {
		case "name":
			q.Name = val
		case "description":
			q.Description = val
		case "param":
			p, err := parseParam(val)
			if err != nil {
				return q, err
			}
			q.Params = append(q.Params, p)
		default:
			body = append(body, line)
		}
	}
	q.SQL = strings.TrimSpace(strings.Join(body, "\n"))
	q.SQL = strings.TrimSuffix(q.SQL, ";")
	if q.Name == "" || q.Description == "" {
		return q, fmt.Errorf("header needs -- name: and -- description: lines")
	}
	for _, p := range q.Params {
		if !strings.Contains(q.SQL, "$"+p.Name) {
			return q, fmt.Errorf("parameter %s is declared but $%s is not used", p.Name, p.Name)
		}
	}
	return q, nil
}

// parseParam reads `server string = "" : description`.
func parseParam(s string) (Param, error) {
	decl, desc, _ := strings.Cut(s, " : ")
	lhs, def, hasDefault := strings.Cut(decl, "=")
	fields := strings.Fields(lhs)
	if len(fields) != 2 || !hasDefault {
		return Param{}, fmt.Errorf("param %q: want `-- param: NAME TYPE = DEFAULT : description`", s)
	}
	p := Param{Name: fields[0], Type: fields[1], Description: strings.TrimSpace(desc)}
	def = strings.TrimSpace(def)
	if unq, err := strconv.Unquote(def); err == nil {
		def = unq
	}
	p.Default = def
	if _, err := convert(p, def); err != nil {
		return p, fmt.Errorf("param %s: default: %w", p.Name, err)
	}
	return p, nil
}

// Bind turns --param values (falling back to defaults) into named arguments.
// An unknown parameter or a value of the wrong type is an error naming it.
func (q Query) Bind(values map[string]string, now time.Time) ([]any, error) {
	known := map[string]bool{}
	args := []any{}
	for _, p := range q.Params {
		known[p.Name] = true
		raw, ok := values[p.Name]
		if !ok {
			raw = p.Default
		}
		v, err := convert(p, raw)
		if err != nil {
			return nil, fmt.Errorf("query %s: --param %s=%s: %w", q.Name, p.Name, raw, err)
		}
		args = append(args, sql.Named(p.Name, v))
	}
	for k := range values {
		if !known[k] {
			return nil, fmt.Errorf("query %s has no parameter %q; its parameters are: %s", q.Name, k, q.paramNames())
		}
	}
	if strings.Contains(q.SQL, "$now") {
		args = append(args, sql.Named("now", now.UTC()))
	}
	return args, nil
}

func (q Query) paramNames() string {
	if len(q.Params) == 0 {
		return "(none)"
	}
	names := make([]string, len(q.Params))
	for i, p := range q.Params {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

func convert(p Param, raw string) (any, error) {
	switch p.Type {
	case "string":
		return raw, nil
	case "int":
		n, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("want a whole number")
		}
		return n, nil
	case "duration":
		d, err := duration.Parse(raw)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("want a positive duration such as 90m, 12h, 7d or 2w")
		}
		return d.Seconds(), nil
	}
	return nil, fmt.Errorf("unknown parameter type %q (string, int, duration)", p.Type)
}
