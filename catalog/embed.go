package catalog

import (
	_ "embed"
	"maps"
	"slices"
)

// proxmoxTools is the real tools/list of the Proxmox MCP server (286 tools),
// embedded because the simulator and the demo need it at run time.
//
//go:embed proxmox-mcp.tools.json
var proxmoxTools []byte

// ProxmoxServer is the server name the embedded Proxmox catalog describes.
const ProxmoxServer = "proxmox-mcp"

// ProxmoxToolsJSON returns the embedded Proxmox MCP tools/list document.
func ProxmoxToolsJSON() []byte { return proxmoxTools }

// builtins are the catalogs shipped in the binary, by server name.
var builtins = map[string][]byte{ProxmoxServer: proxmoxTools}

// Builtin returns the built-in tools/list document of the server called
// name, for `catalog import --builtin NAME`.
func Builtin(name string) ([]byte, bool) {
	doc, ok := builtins[name]
	return doc, ok
}

// BuiltinNames are the names Builtin knows, sorted.
func BuiltinNames() []string { return slices.Sorted(maps.Keys(builtins)) }
