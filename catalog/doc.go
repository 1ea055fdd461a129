// Package catalog reads MCP tools/list catalogs and classifies every tool's risk
// (read, write, destructive, exec, admin) with the source that decided it.
package catalog
