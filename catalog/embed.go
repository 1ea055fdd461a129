package catalog

import _ "embed"

// proxmoxTools is the real tools/list of the Proxmox MCP server (286 tools),
// embedded because the simulator and the demo need it at run time.
//
//go:embed proxmox-mcp.tools.json
var proxmoxTools []byte

// ProxmoxServer is the server name the embedded Proxmox catalog describes.
const ProxmoxServer = "proxmox-mcp"

// ProxmoxToolsJSON returns the embedded Proxmox MCP tools/list document.
func ProxmoxToolsJSON() []byte { return proxmoxTools }
