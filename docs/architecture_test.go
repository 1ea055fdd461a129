// Package docs_test holds docs/ARCHITECTURE.md's package table to the
// code, so that the map people read is the one the compiler builds.
package docs_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/mcptrail/mcptrail"

// row is one row of the package table: its packages (the internal helpers
// share one), the project packages its imports cell names, and whether
// that cell is a list to hold the code to ("any package above" is not).
type row struct {
	pkgs    []string
	imports []string
	listed  bool
}

var backticked = regexp.MustCompile("`([^`]+)`")

// packageTable parses the "## Packages" table of ARCHITECTURE.md.
func packageTable(t *testing.T) []row {
	t.Helper()
	data, err := os.ReadFile("ARCHITECTURE.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(data), "\n## Packages\n")
	require.True(t, ok, "ARCHITECTURE.md has a Packages section")
	var lines []string // the table: the section's first run of lines starting with |
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "|") {
			lines = append(lines, line)
		} else if len(lines) > 0 {
			break
		}
	}
	require.Greater(t, len(lines), 2, "a header, a separator and rows")
	var rows []row
	for _, line := range lines[2:] {
		cells := strings.Split(line, " | ")
		require.Len(t, cells, 3, "three cells (no | inside one): %s", line)
		var r row
		for _, m := range backticked.FindAllStringSubmatch(cells[0], -1) {
			r.pkgs = append(r.pkgs, m[1])
		}
		require.NotEmpty(t, r.pkgs, "a row names its packages: %s", line)
		r.listed = len(r.pkgs) == 1 && !strings.Contains(cells[2], "any package above")
		for _, m := range backticked.FindAllStringSubmatch(cells[2], -1) {
			r.imports = append(r.imports, m[1])
		}
		rows = append(rows, r)
	}
	return rows
}

// projectImports are the project packages that each package of the module
// imports from its non-test files (every build tag), by package path
// relative to the module; bench/ (benchmark programs) is left out.
func projectImports(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != ".." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bench" || name == "mcptrail-demo") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel("..", filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(rel)
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		if _, ok := out[pkg]; !ok {
			out[pkg] = []string{}
		}
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			if rest, ok := strings.CutPrefix(p, module+"/"); ok && !slices.Contains(out[pkg], rest) {
				out[pkg] = append(out[pkg], rest)
			}
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestPackageTableMatchesTheCode: every package of the module has a row;
// each row's imports cell lists exactly the project packages it imports;
// arrows point one way (a package imports only packages above it, and the
// internal helpers, which anyone may use); and the packages that must run
// without a daemon import no NATS client and no CLI framework.
func TestPackageTableMatchesTheCode(t *testing.T) {
	rows := packageTable(t)
	code := projectImports(t)
	at := map[string]int{}
	for i, r := range rows {
		for _, p := range r.pkgs {
			_, dup := at[p]
			assert.False(t, dup, "%s has one row", p)
			at[p] = i
		}
	}
	for pkg := range code {
		_, ok := at[pkg]
		assert.True(t, ok, "package %s has a row in ARCHITECTURE.md's Packages table", pkg)
	}
	for i, r := range rows {
		for _, p := range r.pkgs {
			imports, ok := code[p]
			if !assert.True(t, ok, "the table's %s is a package of the module", p) {
				continue
			}
			for _, imp := range imports {
				j, known := at[imp]
				assert.True(t, known && (j < i || strings.HasPrefix(imp, "internal/")),
					"%s imports %s, which is not above it in the table", p, imp)
			}
			if !r.listed {
				continue
			}
			var listed []string
			for _, name := range r.imports {
				if _, isPkg := at[name]; isPkg {
					listed = append(listed, name)
				}
			}
			assert.ElementsMatch(t, listed, imports, "the imports cell of %s", p)
		}
	}
}

// TestNoDaemonInTheAnalyses: the packages that run without a daemon (the
// event model, policies, catalogs, queries, and recommend, backtest and
// report over a database they are given) import no NATS client, no DuckDB
// driver and no CLI framework.
func TestNoDaemonInTheAnalyses(t *testing.T) {
	none := []string{"github.com/nats-io/", "github.com/duckdb/", "github.com/spf13/"}
	deny := map[string][]string{"audit": none, "policy": none, "catalog": none, "queries": none,
		"recommend": none, "backtest": none, "report": none}
	fset := token.NewFileSet()
	for pkg, prefixes := range deny {
		files, err := filepath.Glob(filepath.Join("..", pkg, "*.go"))
		require.NoError(t, err)
		require.NotEmpty(t, files, pkg)
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
			require.NoError(t, err)
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				for _, prefix := range prefixes {
					assert.False(t, strings.HasPrefix(p, prefix), "%s imports %s", path, p)
				}
			}
		}
	}
}
