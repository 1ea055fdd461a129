// Package mcptest is a small MCP server written with the official Go SDK,
// for the tests of `catalog fetch`: five annotated tools served two to a
// page, so that reading them takes three tools/list requests. A test binary
// serves it over stdio when re-executed with EnvServe set (ServeIfAsked in
// its TestMain), and HTTPHandler serves it over streamable HTTP behind a
// required header.
package mcptest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// EnvServe, set to "stdio" in a test binary's environment, makes
// ServeIfAsked serve the fixture on standard input and output.
const EnvServe = "MCPTRAIL_MCPTEST_SERVE"

// PageSize is the fixture's tools/list page size.
const PageSize = 2

// Name is the server name the fixture gives in its initialize answer.
const Name = "mcptest-fixture"

// Tools are the fixture's tools. get_status has only a title among its
// annotations: with MCPGODEBUG=hintomitempty=1 in the server's environment
// the SDK leaves its false hints out, as a server in another language would.
func Tools() []*mcp.Tool {
	yes, no := true, false
	object := map[string]any{"type": "object"}
	return []*mcp.Tool{
		{Name: "list_vms", Description: "List the virtual machines.", InputSchema: object,
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		{Name: "delete_vm", Description: "Delete a virtual machine.", InputSchema: object,
			Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes}},
		{Name: "create_snapshot", Description: "Take a snapshot of a virtual machine.", InputSchema: object,
			Annotations: &mcp.ToolAnnotations{DestructiveHint: &no}},
		{Name: "guest_exec", Description: "Run a shell command inside a guest.", InputSchema: map[string]any{
			"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}}}},
		{Name: "get_status", Description: "Show a virtual machine's status.", InputSchema: object,
			Annotations: &mcp.ToolAnnotations{Title: "Status"}},
	}
}

// NewServer is the fixture server. Its tools answer every call with an
// empty result, but a call whose argument "fail" is "protocol" with a
// JSON-RPC error, and one whose "fail" is "result" with a result marked
// isError: a gateway may tell the two apart (Intercept gives back the
// quota of the first).
func NewServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: Name, Version: "1"}, &mcp.ServerOptions{PageSize: PageSize})
	for _, t := range Tools() {
		s.AddTool(t, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct{ Fail string }
			_ = json.Unmarshal(req.Params.Arguments, &args)
			switch args.Fail {
			case "protocol":
				return nil, errors.New("the fixture fails this call")
			case "result":
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "the fixture fails this call"}}}, nil
			}
			return &mcp.CallToolResult{}, nil
		})
	}
	return s
}

// ServeIfAsked serves the fixture over stdio and exits when EnvServe is
// "stdio"; otherwise it returns at once. Call it first in TestMain.
func ServeIfAsked() {
	if os.Getenv(EnvServe) != "stdio" {
		return
	}
	if err := NewServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

// Main is a TestMain for a package whose tests start the fixture over
// stdio by running their own test binary again: ServeIfAsked, then the
// tests.
func Main(m *testing.M) {
	ServeIfAsked()
	os.Exit(m.Run())
}

// HTTPHandler serves the fixture over streamable HTTP to requests whose
// header name has the value want, and answers 401 to the others.
func HTTPHandler(name, want string) http.Handler {
	server := NewServer()
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(name) != want {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		mcpHandler.ServeHTTP(w, r)
	})
}
