package analytics

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
)

// deniedFunctions are the functions a query may not call, with why. With
// external access off (sandbox.go), what is left are the functions that
// act on the database or the process from inside a SELECT; DuckDB 1.5 has
// no setting to disable functions. A test holds every table function of the
// bundled DuckDB either here or on its reviewed list, so that an upgrade
// that adds one fails until someone decides.
var deniedFunctions = map[string]string{
	"checkpoint":                  "it writes the database file",
	"force_checkpoint":            "it writes the database file",
	"enable_logging":              "it changes the database's settings",
	"disable_logging":             "it changes the database's settings",
	"truncate_duckdb_logs":        "it deletes the database's logs",
	"write_log":                   "it writes to the database's logs",
	"enable_profiling":            "it changes the database's settings",
	"disable_profiling":           "it changes the database's settings",
	"enable_peg_parser":           "it changes the database's settings",
	"disable_peg_parser":          "it changes the database's settings",
	"query":                       "it runs SQL given as text, out of sight of these checks",
	"query_table":                 "it runs SQL given as text, out of sight of these checks",
	"json_execute_serialized_sql": "it runs SQL given as text, out of sight of these checks",
	"json_serialize_plan":         "it binds and plans SQL given as text, out of sight of these checks",
	"arrow_scan":                  "it reads memory at addresses it is given",
	"arrow_scan_dumb":             "it reads memory at addresses it is given",
	"duckdb_secrets":              "it lists credentials",
	"which_secret":                "it lists credentials",
	"getenv":                      "environment variables can hold secrets",
	"nextval":                     "it advances a sequence",
}

// vet parses query with DuckDB's own parser (json_serialize_sql, which
// neither binds nor runs anything) and accepts exactly one SELECT, or
// EXPLAIN [ANALYZE] of one, that calls no denied function. Function names
// come from the parse tree: case, quotes, a schema or catalog prefix
// (main.checkpoint, system.main.checkpoint), comments and method syntax
// all arrive as the same function_name node.
func vet(ctx context.Context, conn *sql.Conn, query string) (explain bool, err error) {
	tree, err := parse(ctx, conn, query)
	if err != nil {
		return false, err
	}
	if tree.Error && strings.HasPrefix(tree.Message, "Only SELECT statements") {
		if inner, ok := explained(query); ok {
			if t, err := parse(ctx, conn, inner); err == nil && !t.Error {
				tree, explain = t, true
			}
		}
	}
	if tree.Error {
		if strings.HasPrefix(tree.Message, "Only SELECT statements") {
			return false, refusal(query)
		}
		return false, fmt.Errorf("query: %s", tree.Message)
	}
	if len(tree.Statements) != 1 {
		return false, fmt.Errorf("%w: send exactly one SELECT statement", ErrNotReadOnly)
	}
	if name, why := deniedCall(tree.Statements[0]); name != "" {
		return false, fmt.Errorf("%w: %s() is not available in queries: %s", ErrNotReadOnly, name, why)
	}
	return explain, nil
}

type parseTree struct {
	Error      bool   `json:"error"`
	Message    string `json:"error_message"`
	Statements []any  `json:"statements"`
}

func parse(ctx context.Context, conn *sql.Conn, query string) (parseTree, error) {
	var raw string
	var t parseTree
	if err := conn.QueryRowContext(ctx, `SELECT json_serialize_sql(?::VARCHAR)::VARCHAR`, query).Scan(&raw); err != nil {
		return t, fmt.Errorf("query: parse: %w", err)
	}
	if err := json.Unmarshal([]byte(raw), &t); err != nil {
		return t, fmt.Errorf("query: parse: %w", err)
	}
	return t, nil
}

// deniedCall walks a parse tree for function calls (every node with a
// function_name: scalar, aggregate, window and table functions alike).
func deniedCall(node any) (name, why string) {
	switch n := node.(type) {
	case map[string]any:
		if f, ok := n["function_name"].(string); ok {
			if why, ok := deniedFunctions[strings.ToLower(f)]; ok {
				return f, why
			}
		}
		for _, v := range n {
			if name, why := deniedCall(v); name != "" {
				return name, why
			}
		}
	case []any:
		for _, v := range n {
			if name, why := deniedCall(v); name != "" {
				return name, why
			}
		}
	}
	return "", ""
}

// explained is the statement that query explains when it is
// EXPLAIN [ANALYZE] statement; EXPLAIN with options or after a comment is
// not recognised (and so refused).
func explained(query string) (string, bool) {
	rest, ok := cutWord(query, "EXPLAIN")
	if !ok {
		return "", false
	}
	for _, w := range []string{"ANALYZE", "ANALYSE"} {
		if r, ok := cutWord(rest, w); ok {
			return r, true
		}
	}
	return rest, true
}

// cutWord removes the keyword w, in any case, and the space after it from
// the start of s.
func cutWord(s, w string) (string, bool) {
	s = strings.TrimLeftFunc(s, unicode.IsSpace)
	if len(s) <= len(w) || !strings.EqualFold(s[:len(w)], w) || !unicode.IsSpace(rune(s[len(w)])) {
		return "", false
	}
	return s[len(w):], true
}

// refusal is the error for statements that are not all SELECT, named by
// the first word (a message only: the parser decided).
func refusal(query string) error {
	word := ""
	if f := strings.FieldsFunc(query, func(r rune) bool { return !unicode.IsLetter(r) }); len(f) > 0 {
		word = strings.ToUpper(f[0])
	}
	switch word {
	case "", "SELECT", "WITH", "FROM", "VALUES", "TABLE", "EXPLAIN", "DESCRIBE", "SHOW", "SUMMARIZE", "PIVOT", "UNPIVOT":
		return fmt.Errorf("%w: send exactly one SELECT (or EXPLAIN SELECT) statement", ErrNotReadOnly)
	}
	return fmt.Errorf("%w: a %s statement could change the database; only SELECT is allowed", ErrNotReadOnly, word)
}
