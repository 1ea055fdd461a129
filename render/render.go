// Package render writes tabular results as an aligned terminal table, CSV or
// JSON. Every command that prints rows (query, catalog list, suppressions...)
// goes through it, so formats and value formatting agree everywhere. It also
// makes untrusted text inert for a terminal (Terminal) and for Markdown
// (MarkdownText, MarkdownCode), for every renderer that prints names from
// events. The table escapes control characters in every cell; CSV and JSON
// keep values exact.
package render

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// Format is an output format for rows.
type Format string

// The row formats of `query`, `catalog list` and `suppressions`.
const (
	Table Format = "table"
	CSV   Format = "csv"
	JSON  Format = "json"
)

// ParseFormat validates a --format value for row output.
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(strings.TrimSpace(s))); f {
	case Table, CSV, JSON:
		return f, nil
	case "":
		return Table, nil
	}
	return "", fmt.Errorf("unknown --format %q: allowed values are table, csv, json", s)
}

// Writer receives a header once, then rows; Close finishes the output.
// CSV and JSON stream; the table buffers its rows to align them.
type Writer interface {
	Header(cols []string) error
	Row(vals []any) error
	Close() error
}

// New returns a Writer of format f on w.
func New(f Format, w io.Writer) Writer {
	switch f {
	case CSV:
		return &csvWriter{w: csv.NewWriter(w)}
	case JSON:
		return &jsonWriter{w: bufio.NewWriter(w)}
	default:
		return &tableWriter{w: w}
	}
}

// Value formats one value as text: times in RFC 3339 UTC, lists and maps as
// JSON, NULL as empty.
func Value(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []byte:
		return string(x)
	case bool:
		return strconv.FormatBool(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case int:
		return strconv.Itoa(x)
	case uint64:
		return strconv.FormatUint(x, 10)
	case uint32:
		return strconv.FormatUint(uint64(x), 10)
	case float64:
		return formatFloat(x)
	case float32:
		return formatFloat(float64(x))
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case *big.Int:
		return x.String()
	case fmt.Stringer:
		return x.String()
	}
	b, err := json.Marshal(jsonValue(v))
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func formatFloat(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	// The shortest representation that reads back as the same float.
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// jsonValue converts driver values to what encoding/json writes well.
func jsonValue(v any) any {
	switch x := v.(type) {
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case []byte:
		return string(x)
	case *big.Int:
		return json.Number(x.String())
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return strconv.FormatFloat(x, 'g', -1, 64)
		}
		return x
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = jsonValue(x[i])
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, val := range x {
			out[fmt.Sprint(k)] = jsonValue(val)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, val := range x {
			out[k] = jsonValue(val)
		}
		return out
	case fmt.Stringer:
		return x.String()
	}
	return v
}

type csvWriter struct {
	w   *csv.Writer
	rec []string
}

func (c *csvWriter) Header(cols []string) error { return c.w.Write(cols) }

func (c *csvWriter) Row(vals []any) error {
	c.rec = c.rec[:0]
	for _, v := range vals {
		c.rec = append(c.rec, Value(v))
	}
	return c.w.Write(c.rec)
}

func (c *csvWriter) Close() error {
	c.w.Flush()
	return c.w.Error()
}

// jsonWriter writes one array of objects whose keys keep the column order.
type jsonWriter struct {
	w    *bufio.Writer
	cols [][]byte
	n    int
}

func (j *jsonWriter) Header(cols []string) error {
	j.cols = make([][]byte, len(cols))
	for i, c := range cols {
		b, _ := json.Marshal(c)
		j.cols[i] = b
	}
	_, err := j.w.WriteString("[")
	return err
}

func (j *jsonWriter) Row(vals []any) error {
	if j.n > 0 {
		j.w.WriteString(",")
	}
	j.n++
	j.w.WriteString("\n  {")
	for i, v := range vals {
		if i > 0 {
			j.w.WriteString(", ")
		}
		j.w.Write(j.cols[i])
		j.w.WriteString(": ")
		b, err := json.Marshal(jsonValue(v))
		if err != nil {
			return fmt.Errorf("encode column %s: %w", j.cols[i], err)
		}
		j.w.Write(b)
	}
	_, err := j.w.WriteString("}")
	return err
}

func (j *jsonWriter) Close() error {
	if j.cols == nil {
		j.w.WriteString("[")
	}
	if j.n > 0 {
		j.w.WriteString("\n")
	}
	j.w.WriteString("]\n")
	return j.w.Flush()
}

type tableWriter struct {
	w       io.Writer
	cols    []string
	rows    [][]string
	numeric []bool
}

func (t *tableWriter) Header(cols []string) error {
	t.cols = make([]string, len(cols))
	for i, c := range cols {
		t.cols[i] = Terminal(c)
	}
	t.numeric = make([]bool, len(cols))
	for i := range t.numeric {
		t.numeric[i] = true
	}
	return nil
}

func (t *tableWriter) Row(vals []any) error {
	row := make([]string, len(vals))
	for i, v := range vals {
		row[i] = Terminal(Value(v))
		switch v.(type) {
		case nil, int, int32, int64, uint32, uint64, float32, float64, *big.Int:
		default:
			t.numeric[i] = false
		}
	}
	t.rows = append(t.rows, row)
	return nil
}

// Close renders the table: a plain, borderless layout that reads well in a
// terminal and diffs well in golden files. Numbers are right-aligned.
func (t *tableWriter) Close() error {
	aligns := make([]tw.Align, len(t.cols))
	for i, num := range t.numeric {
		aligns[i] = tw.AlignLeft
		if num && len(t.rows) > 0 {
			aligns[i] = tw.AlignRight
		}
	}
	gap := tw.Padding{Left: "", Right: "  ", Overwrite: true}
	var buf bytes.Buffer
	table := tablewriter.NewTable(&buf,
		tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{
			Borders: tw.BorderNone,
			Symbols: tw.NewSymbols(tw.StyleASCII),
			Settings: tw.Settings{
				Separators: tw.Separators{BetweenRows: tw.Off, BetweenColumns: tw.Off},
				Lines:      tw.Lines{ShowHeaderLine: tw.On},
			},
		})),
		tablewriter.WithHeaderConfig(tw.CellConfig{
			Formatting: tw.CellFormatting{AutoFormat: tw.Off, AutoWrap: tw.WrapNone},
			Alignment:  tw.CellAlignment{Global: tw.AlignLeft},
			Padding:    tw.CellPadding{Global: gap},
		}),
		tablewriter.WithRowConfig(tw.CellConfig{
			Formatting: tw.CellFormatting{AutoWrap: tw.WrapNone},
			Alignment:  tw.CellAlignment{PerColumn: aligns},
			Padding:    tw.CellPadding{Global: gap},
		}),
	)
	table.Header(toAny(t.cols)...)
	if err := table.Bulk(t.rows); err != nil {
		return fmt.Errorf("render table: %w", err)
	}
	if err := table.Render(); err != nil {
		return fmt.Errorf("render table: %w", err)
	}
	// The padding leaves trailing blanks; golden files and terminals are better without.
	for _, line := range strings.SplitAfter(buf.String(), "\n") {
		if line == "" {
			continue
		}
		if _, err := io.WriteString(t.w, strings.TrimRight(line, " \n")+"\n"); err != nil {
			return err
		}
	}
	if len(t.rows) == 0 {
		_, err := fmt.Fprintln(t.w, "(no rows)")
		return err
	}
	return nil
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i := range s {
		out[i] = s[i]
	}
	return out
}
