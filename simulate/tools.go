package simulate

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/mcptrail/mcptrail/catalog"
)

// server is the MCP server every simulated event names.
const server = catalog.ProxmoxServer

// unknownTool is the one tool name the simulator calls that the catalog does
// not list: an agent's typo for list_vms.
const unknownTool = "list_vm"

// category is this package's own risk label for the tools it calls, used for
// latencies and for the tests' read share; the catalog package owns the real
// classification.
type category uint8

const (
	catRead category = iota
	catWrite
	catDestructive
	catExec
	catAdmin
)

func (c category) String() string {
	return [...]string{"read", "write", "destructive", "exec", "admin"}[c]
}

// toolSpec is what the simulator knows about a tool it calls: its category and
// the median and spread of its upstream latency in milliseconds.
type toolSpec struct {
	cat    category
	median float64
	sigma  float64
}

// tools lists every catalog tool the scenarios call. Agents use a few dozen of
// the 286 tools; the rest are never called, as in real deployments.
var tools = map[string]toolSpec{
	// Reads.
	"get_cluster_resources":   {catRead, 140, 0.5},
	"get_cluster_status":      {catRead, 60, 0.5},
	"get_ha_status":           {catRead, 45, 0.4},
	"get_next_vmid":           {catRead, 25, 0.4},
	"list_nodes":              {catRead, 40, 0.4},
	"get_node_status":         {catRead, 55, 0.5},
	"get_node_syslog":         {catRead, 160, 0.6},
	"get_node_report":         {catRead, 2400, 0.4},
	"list_node_tasks":         {catRead, 80, 0.5},
	"get_node_storage_status": {catRead, 70, 0.5},
	"list_storage_content":    {catRead, 120, 0.6},
	"list_vms":                {catRead, 75, 0.5},
	"get_vm_status":           {catRead, 40, 0.45},
	"get_vm_config":           {catRead, 45, 0.45},
	"get_vm_rrddata":          {catRead, 220, 0.5},
	"list_vm_snapshots":       {catRead, 65, 0.5},
	"vm_agent_get_info":       {catRead, 120, 0.6},
	"vm_agent_exec_status":    {catRead, 18, 0.35},
	"get_task_status":         {catRead, 22, 0.35},
	"list_containers":         {catRead, 70, 0.5},
	"get_container_status":    {catRead, 40, 0.45},
	"list_user_tokens":        {catRead, 35, 0.4},
	// Writes.
	"start_vm":           {catWrite, 650, 0.5},
	"update_vm_config":   {catWrite, 300, 0.5},
	"create_vm_snapshot": {catWrite, 850, 0.5},
	"clone_vm":           {catWrite, 1400, 0.5},
	"migrate_vm":         {catWrite, 900, 0.5},
	// Destructive: deleting, and taking a guest down.
	"shutdown_vm":           {catDestructive, 700, 0.5},
	"stop_vm":               {catDestructive, 600, 0.5},
	"reboot_vm":             {catDestructive, 700, 0.5},
	"delete_vm":             {catDestructive, 1200, 0.5},
	"delete_vm_snapshot":    {catDestructive, 900, 0.5},
	"rollback_vm_snapshot":  {catDestructive, 1100, 0.5},
	"delete_storage_volume": {catDestructive, 800, 0.5},
	// Exec.
	"vm_agent_exec":         {catExec, 180, 0.5},
	"vm_agent_file_read":    {catExec, 95, 0.5},
	"vm_agent_set_password": {catExec, 150, 0.5},
	"proxmox_api_raw":       {catExec, 120, 0.6},
	// Admin.
	"create_user_token": {catAdmin, 110, 0.4},
	"update_acl":        {catAdmin, 90, 0.4},
}

// catalogTool is the part of a tools/list entry the simulator reads.
type catalogTool struct {
	Name        string          `json:"name"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

var (
	catalogOnce  sync.Once
	catalogNames map[string]bool
	catalogErr   error
)

// catalogTools parses the embedded Proxmox tools/list once. The catalog
// package's own parser is written concurrently, so this one stays minimal.
func catalogTools() (map[string]bool, error) {
	catalogOnce.Do(func() {
		var doc struct {
			Tools []catalogTool `json:"tools"`
		}
		if err := json.Unmarshal(catalog.ProxmoxToolsJSON(), &doc); err != nil {
			catalogErr = fmt.Errorf("simulate: parse embedded Proxmox catalog: %w", err)
			return
		}
		catalogNames = make(map[string]bool, len(doc.Tools))
		for _, t := range doc.Tools {
			catalogNames[t.Name] = true
		}
	})
	return catalogNames, catalogErr
}
