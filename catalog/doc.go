// Package catalog reads MCP tools/list catalogs and classifies every tool's risk
// (read, write, destructive, exec, admin) with the source that decided it.
//
// Parse reads a tools/list document ({"tools": [...]}, with or without a
// "server" field, or a whole JSON-RPC response) and reports bad input with the
// file, the JSON path and what was expected there. Classify follows the SPEC
// ("Risk classification"): a user override, then explicit MCP annotations, then
// the riskiest heuristic signal of the name, the description and the input
// schema, and otherwise the default (write). Every Classification says which
// Source decided and Why, so a reviewer can disagree with a reason in hand and
// record an override (LoadOverrides reads them from JSON or YAML).
//
// Categories are totally ordered, read < write < destructive < exec < admin,
// and map onto severities info, low, high, high, critical (see Category).
//
// The package imports nothing else from mcptrail.
package catalog
