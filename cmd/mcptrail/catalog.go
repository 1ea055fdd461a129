package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/catalog"
	"github.com/mcptrail/mcptrail/mcpclient"
	"github.com/mcptrail/mcptrail/render"
)

func newCatalogCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "catalog",
		Short: "Import or fetch a server's tool catalog and list its tools' risk",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErrorf("give a subcommand: catalog import FILE, catalog import --builtin NAME, catalog fetch --server S (--command CMD | --url URL), or catalog list --server S")
		},
	}
	cmd.AddCommand(newCatalogImportCmd(a), newCatalogFetchCmd(a), newCatalogListCmd(a))
	return cmd
}

func newCatalogImportCmd(a *app) *cobra.Command {
	var server, builtin string
	cmd := &cobra.Command{
		Use:   "import FILE | --builtin NAME",
		Short: "Import an MCP tools/list result and classify every tool's risk",
		Long: `Import an MCP tools/list result ({"tools": [...]}, with or without a "server"
field) and classify every tool as read, write, destructive, exec or admin: a
user override (recommend.overrides) wins, then MCP annotations, then the
riskiest of the name, description and argument enums. Each import is recorded,
so that tools added later get the recommend.grace period before being hidden.

--builtin NAME imports a catalog shipped in the binary instead of a file
(` + strings.Join(catalog.BuiltinNames(), ", ") + `); its server is NAME unless --server says otherwise.`,
		Example: `  mcptrail catalog import proxmox-mcp.tools.json --server proxmox-mcp
  mcptrail catalog import --builtin proxmox-mcp`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var doc *api.File
			switch {
			case builtin != "" && len(args) > 0:
				return usageErrorf("give FILE or --builtin NAME, not both")
			case builtin != "":
				content, ok := catalog.Builtin(builtin)
				if !ok {
					return usageErrorf("no built-in catalog %q: the built-in catalogs are %s", builtin, strings.Join(catalog.BuiltinNames(), ", "))
				}
				doc = &api.File{Name: builtin + " (built-in catalog)", Content: content}
				if server == "" {
					server = builtin
				}
			case len(args) == 0:
				return usageErrorf("give a tools/list FILE, or --builtin NAME (built in: %s)", strings.Join(catalog.BuiltinNames(), ", "))
			default:
				var err error
				if doc, err = readInput("catalog", args[0]); err != nil {
					return err
				}
			}
			return a.importCatalog(cmd.Context(), server, doc)
		},
	}
	cmd.Flags().StringVar(&server, "server", "", "server name (default: the file's \"server\" field, or the --builtin NAME)")
	cmd.Flags().StringVar(&builtin, "builtin", "", "import the catalog built into mcptrail for this server ("+strings.Join(catalog.BuiltinNames(), ", ")+") instead of a FILE")
	return cmd
}

// importCatalog imports a tools/list document, in the daemon when it holds
// the database: the document travels as content, like a file.
func (a *app) importCatalog(ctx context.Context, server string, doc *api.File) error {
	settings, err := a.settings()
	if err != nil {
		return err
	}
	req := &api.CatalogImportRequest{Server: server, Catalog: *doc, Overrides: settings.Overrides}
	return a.dispatch(ctx, req, false, func(ctx context.Context, store *analytics.Store) error {
		return a.runCatalogImport(ctx, store, req)
	})
}

func newCatalogFetchCmd(a *app) *cobra.Command {
	var server, command, url, out string
	var headers []string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "fetch --server S (--command \"CMD ARGS...\" | --url URL [--header 'Name: value']...)",
		Short: "Read tools/list from a live MCP server and import it",
		Long: `Read tools/list from a live MCP server, every page of it, and import it as
catalog import does. --command starts the server as a child process and speaks
MCP over its standard input and output (the line is split into arguments as a
shell would, but no shell runs it); --url speaks streamable HTTP to the
server's MCP endpoint, with --header for its credentials. Header values are
never logged or stored. The child process is stopped when the fetch ends, and
--timeout bounds the whole fetch. The fetch runs here, in the CLI, also when a
daemon holds the database: the daemon is sent the fetched document, never a
command line or a URL.`,
		Example: `  mcptrail catalog fetch --server everything --command "npx -y @modelcontextprotocol/server-everything"
  mcptrail catalog fetch --server github --url https://mcp.example.com/mcp \
      --header "Authorization: Bearer $TOKEN" --out github.tools.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			src, err := fetchSource(server, command, url, headers, timeout)
			if err != nil {
				return err
			}
			src.Stderr = a.stderr
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			res, err := mcpclient.ToolsList(ctx, src)
			if err != nil {
				return err
			}
			doc, err := res.Document(server)
			if err != nil {
				return err
			}
			a.log.Info("fetched tools/list", "from", src.Describe(), "tools", len(res.Tools), "pages", res.Pages, "server_name", res.ServerName)
			if out != "" {
				if err := os.WriteFile(out, doc, 0o644); err != nil {
					return fmt.Errorf("--out: %w", err)
				}
			}
			return a.importCatalog(cmd.Context(), server, &api.File{Name: "tools/list of " + src.Describe(), Content: doc})
		},
	}
	cmd.Flags().StringVar(&server, "server", "", "server name the catalog is stored under (required)")
	cmd.Flags().StringVar(&command, "command", "", "the server's command line, for a stdio server")
	cmd.Flags().StringVar(&url, "url", "", "the server's streamable HTTP MCP endpoint")
	cmd.Flags().StringArrayVar(&headers, "header", nil, "'Name: value' sent with every HTTP request (repeatable; with --url)")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long the whole fetch may take")
	cmd.Flags().StringVar(&out, "out", "", "also write the fetched tools/list JSON to this file")
	return cmd
}

// fetchSource checks catalog fetch's flags and makes its source.
func fetchSource(server, command, url string, headers []string, timeout time.Duration) (mcpclient.Source, error) {
	var src mcpclient.Source
	switch {
	case server == "":
		return src, usageErrorf("--server is required: the name the catalog is stored under")
	case (command == "") == (url == ""):
		return src, usageErrorf("give the server as --command \"CMD ARGS...\" (stdio) or --url URL (streamable HTTP), one of them")
	case len(headers) > 0 && url == "":
		return src, usageErrorf("--header goes with --url")
	case timeout <= 0:
		return src, usageErrorf("--timeout must be positive")
	}
	if command != "" {
		args, err := mcpclient.SplitCommand(command)
		if err != nil {
			return src, usageErrorf("%v", err)
		}
		src.Command = args
		return src, nil
	}
	src.URL, src.Header = url, http.Header{}
	for _, h := range headers {
		if err := mcpclient.ParseHeader(src.Header, h); err != nil {
			return src, usageErrorf("%v", err)
		}
	}
	return src, nil
}

func newCatalogListCmd(a *app) *cobra.Command {
	var server, format string
	cmd := &cobra.Command{
		Use:   "list --server S",
		Short: "List a server's imported tools with their risk category",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &api.CatalogListRequest{Server: server, Format: format}
			if err := checkCatalogList(req); err != nil {
				return err
			}
			return a.dispatch(cmd.Context(), req, true, func(ctx context.Context, store *analytics.Store) error {
				return a.runCatalogList(ctx, store, req)
			})
		},
	}
	cmd.Flags().StringVar(&server, "server", "", "server name (required)")
	cmd.Flags().StringVar(&format, "format", "table", "output: table or json")
	return cmd
}

// runCatalogImport imports, classifies and records a tools/list document.
func (a *app) runCatalogImport(ctx context.Context, store *analytics.Store, req *api.CatalogImportRequest) error {
	if req.Overrides != nil {
		a.overridesDoc = req.Overrides
	}
	name, n, added, err := a.importCatalogData(ctx, store, req.Catalog.Content, req.Catalog.Name, req.Server)
	if err != nil {
		return err
	}
	tools, err := store.Tools(ctx, name)
	if err != nil {
		return err
	}
	byCat := map[string]int{}
	for _, t := range tools {
		byCat[t.Category]++
	}
	var parts []string
	for _, c := range []string{"read", "write", "destructive", "exec", "admin"} {
		parts = append(parts, fmt.Sprintf("%s %d", c, byCat[c]))
	}
	fmt.Fprintf(a.stdout, "imported %d tools for %s (%d new): %s\n", n, name, added, strings.Join(parts, ", "))
	return nil
}

func checkCatalogList(req *api.CatalogListRequest) error {
	if req.Server == "" {
		return usageErrorf("--server is required")
	}
	if req.Format != "" && req.Format != "table" && req.Format != "json" {
		return usageErrorf("unknown --format %q: allowed values are table, json", req.Format)
	}
	return nil
}

// runCatalogList prints a server's imported tools with their risk.
func (a *app) runCatalogList(ctx context.Context, store *analytics.Store, req *api.CatalogListRequest) error {
	if err := checkCatalogList(req); err != nil {
		return err
	}
	tools, err := store.Tools(ctx, req.Server)
	if err != nil {
		return err
	}
	if len(tools) == 0 {
		return fmt.Errorf("no catalog imported for server %q: run mcptrail catalog import FILE --server %s, or mcptrail catalog fetch --server %s with the server's --command or --url", req.Server, req.Server, req.Server)
	}
	if req.Format == "json" {
		type row struct {
			Tool     string `json:"tool"`
			Category string `json:"category"`
			Severity string `json:"severity"`
			Source   string `json:"source"`
		}
		rows := make([]row, len(tools))
		for i, t := range tools {
			rows[i] = row{t.Tool, t.Category, t.Severity, t.RiskSource}
		}
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	w := render.New(render.Table, a.stdout)
	_ = w.Header([]string{"tool", "category", "severity", "source", "why"})
	for _, t := range tools {
		_ = w.Row([]any{t.Tool, t.Category, t.Severity, t.RiskSource, t.Why})
	}
	return w.Close()
}
