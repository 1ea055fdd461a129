package catalog

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type classifyCase struct {
	name       string
	tool       Tool
	overrides  Overrides
	want       Category
	wantSource Source
	whyHas     string // a fragment the explanation must contain, if set
}

func runClassify(t *testing.T, tests []classifyCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Classify(tt.tool, tt.overrides)
			assert.Equal(t, tt.tool.Name, got.Tool)
			assert.Equal(t, tt.want, got.Category, "why: %s", got.Why)
			assert.Equal(t, tt.wantSource, got.Source, "why: %s", got.Why)
			assert.Equal(t, tt.want.Severity(), got.Severity)
			assert.NotEmpty(t, got.Why)
			if tt.whyHas != "" {
				assert.Contains(t, got.Why, tt.whyHas)
			}
		})
	}
}

func ann(ro, de *bool) *Annotations { return &Annotations{ReadOnlyHint: ro, DestructiveHint: de} }

var (
	yes = boolp(true)
	no  = boolp(false)
)

func TestClassifyPrecedence(t *testing.T) {
	deleteVM := Tool{Name: "delete_vm", Description: "Delete a VM.", Annotations: ann(yes, nil)}
	runClassify(t, []classifyCase{
		{"override beats annotation", deleteVM, Overrides{"delete_vm": {Category: Write, Why: "reviewed: soft delete"}}, Write, SourceOverride, "reviewed: soft delete"},
		{"override without why", deleteVM, Overrides{"delete_vm": {Category: Admin}}, Admin, SourceOverride, "set by override"},
		{"override of another tool is ignored", deleteVM, Overrides{"other": {Category: Admin}}, Destructive, SourceName, "readOnlyHint=true does not lower it"},
		{"invalid override category is ignored", deleteVM, Overrides{"delete_vm": {Category: "bogus"}}, Destructive, SourceName, ""},
		{"a server's readOnly hint does not lower a delete name", deleteVM, nil, Destructive, SourceName, "readOnlyHint=true does not lower it"},
		{"annotation beats a read name", Tool{Name: "get_vm", Annotations: ann(nil, yes)}, nil, Destructive, SourceAnnotation, "destructiveHint=true"},
		{"name without annotations", Tool{Name: "delete_vm"}, nil, Destructive, SourceName, `"delete"`},
		{"override beats exec name", Tool{Name: "run_command"}, Overrides{"run_command": {Category: Read}}, Read, SourceOverride, ""},
	})
}

func TestClassifyAnnotations(t *testing.T) {
	runClassify(t, []classifyCase{
		{"readOnly true", Tool{Name: "frob", Annotations: ann(yes, nil)}, nil, Read, SourceAnnotation, "readOnlyHint=true"},
		{"readOnly true does not lower an exec name", Tool{Name: "run_command", Annotations: ann(yes, nil)}, nil, Exec, SourceName, "does not lower it"},
		{"readOnly true settles a write name", Tool{Name: "update_vm", Annotations: ann(yes, nil)}, nil, Read, SourceAnnotation, "readOnlyHint=true"},
		{"destructive true", Tool{Name: "get_thing", Annotations: ann(nil, yes)}, nil, Destructive, SourceAnnotation, "destructiveHint=true"},
		{"destructive true with readOnly false", Tool{Name: "frob", Annotations: ann(no, yes)}, nil, Destructive, SourceAnnotation, ""},
		{"both true is contradictory, riskier wins", Tool{Name: "get_thing", Annotations: ann(yes, yes)}, nil, Destructive, SourceAnnotation, "contradictory"},
		{"both false does not lower a delete verb", Tool{Name: "delete_vm", Annotations: ann(no, no)}, nil, Destructive, SourceName, "readOnlyHint=false, destructiveHint=false does not lower it"},
		{"both false is write, beating a read verb", Tool{Name: "get_vm", Annotations: ann(no, no)}, nil, Write, SourceAnnotation, ""},
		{"readOnly false alone lifts a read name to write", Tool{Name: "get_vm", Annotations: ann(no, nil)}, nil, Write, SourceAnnotation, "readOnlyHint=false"},
		{"readOnly false alone leaves destruction to the name", Tool{Name: "delete_vm", Annotations: ann(no, nil)}, nil, Destructive, SourceName, ""},
		{"destructive false alone does not lower a delete verb", Tool{Name: "delete_vm", Annotations: ann(nil, no)}, nil, Destructive, SourceName, "destructiveHint=false does not lower it"},
		{"destructive false alone leaves a read to the name", Tool{Name: "get_vm", Annotations: ann(nil, no)}, nil, Read, SourceName, ""},
		// Absent hints are not MCP's defaults (readOnly false, destructive true).
		{"absent hints: name decides", Tool{Name: "get_vm", Annotations: &Annotations{Title: "Get VM"}}, nil, Read, SourceName, ""},
		{"absent hints: unknown tool is write, not destructive", Tool{Name: "frobnicate", Annotations: &Annotations{Title: "Frob"}}, nil, Write, SourceDefault, ""},
		{"idempotent and open-world hints do not classify", Tool{Name: "frobnicate", Annotations: &Annotations{IdempotentHint: yes, OpenWorldHint: yes}}, nil, Write, SourceDefault, ""},
		// Annotations cannot say exec or admin.
		{"exec name raises a non-destructive write annotation", Tool{Name: "run_command", Annotations: ann(no, no)}, nil, Exec, SourceName, "does not lower it"},
		{"admin name raises a destructive annotation", Tool{Name: "delete_user", Annotations: ann(nil, yes)}, nil, Admin, SourceName, ""},
	})
}

func TestClassifyName(t *testing.T) {
	runClassify(t, []classifyCase{
		// verbs
		{"get", Tool{Name: "get_vm_status"}, nil, Read, SourceName, `verb "get"`},
		{"list", Tool{Name: "list_vms"}, nil, Read, SourceName, ""},
		{"describe camelCase", Tool{Name: "describeInstances"}, nil, Read, SourceName, ""},
		{"show", Tool{Name: "show-config"}, nil, Read, SourceName, ""},
		{"create", Tool{Name: "create_vm"}, nil, Write, SourceName, ""},
		{"update camelCase", Tool{Name: "updateVMConfig"}, nil, Write, SourceName, ""},
		{"start", Tool{Name: "start_container"}, nil, Write, SourceName, ""},
		{"migrate", Tool{Name: "migrate_vm"}, nil, Write, SourceName, ""},
		{"delete", Tool{Name: "delete_vm"}, nil, Destructive, SourceName, ""},
		{"remove", Tool{Name: "removeVolume"}, nil, Destructive, SourceName, ""},
		{"purge", Tool{Name: "purge_queue"}, nil, Destructive, SourceName, ""},
		{"rollback", Tool{Name: "rollback_snapshot"}, nil, Destructive, SourceName, ""},
		{"reset", Tool{Name: "reset_vm"}, nil, Destructive, SourceName, ""},
		{"initialize", Tool{Name: "initialize_disk"}, nil, Destructive, SourceName, ""},
		{"prune", Tool{Name: "prune_images"}, nil, Destructive, SourceName, ""},
		{"stop is a power-off", Tool{Name: "stop_vm"}, nil, Destructive, SourceName, ""},
		{"verb glued to all", Tool{Name: "stopall_node"}, nil, Destructive, SourceName, `"stop"`},
		{"exec", Tool{Name: "exec_in_pod"}, nil, Exec, SourceName, ""},
		{"execute", Tool{Name: "executeQuery"}, nil, Exec, SourceName, ""},
		{"eval", Tool{Name: "browser_eval"}, nil, Exec, SourceName, ""},
		// nouns
		{"code noun with a mutating verb", Tool{Name: "send_monitor_command"}, nil, Exec, SourceName, `noun "command"`},
		{"run with code", Tool{Name: "run_script"}, nil, Exec, SourceName, ""},
		{"run alone", Tool{Name: "run"}, nil, Exec, SourceName, ""},
		{"run of a fixed operation", Tool{Name: "run_apt_update"}, nil, Write, SourceName, "fixed operation"},
		{"raw api pass-through", Tool{Name: "api_raw"}, nil, Exec, SourceName, "raw API"},
		{"console noun beats a read verb", Tool{Name: "get_vm_vncproxy"}, nil, Exec, SourceName, "console"},
		{"admin noun with a mutating verb", Tool{Name: "create_user"}, nil, Admin, SourceName, `"user"`},
		{"admin noun beats a delete verb", Tool{Name: "delete_api_token"}, nil, Admin, SourceName, ""},
		{"admin noun plural", Tool{Name: "update_permissions"}, nil, Admin, SourceName, ""},
		{"two-word admin noun", Tool{Name: "create_api_key"}, nil, Admin, SourceName, `"apikey"`},
		{"admin noun with a read verb stays read", Tool{Name: "list_user_tokens"}, nil, Read, SourceName, ""},
		{"firewall", Tool{Name: "add_firewall_rule"}, nil, Admin, SourceName, ""},
		{"certificate", Tool{Name: "order_certificate"}, nil, Admin, SourceName, ""},
		{"user group", Tool{Name: "create_group"}, nil, Admin, SourceName, "user group"},
		{"qualified group is not access control", Tool{Name: "create_ha_group"}, nil, Write, SourceName, ""},
		{"leading verb governs later verb-like words", Tool{Name: "list_file_restore"}, nil, Read, SourceName, ""},
		{"chained verbs: riskiest", Tool{Name: "get_or_delete_item"}, nil, Destructive, SourceName, `"delete"`},
		{"noun-first name: riskiest verb", Tool{Name: "bulk_shutdown_guests"}, nil, Destructive, SourceName, ""},
		{"result noun makes a query", Tool{Name: "job_exec_status"}, nil, Read, SourceName, `"status"`},
		{"download to the caller reads", Tool{Name: "download_backup_file", Description: "Download a file from a backup."}, nil, Read, SourceName, ""},
		{"download into storage writes", Tool{Name: "download_url_to_storage"}, nil, Write, SourceName, "server-side storage"},
		{"download into storage, by description", Tool{Name: "download_template", Description: "Download a template to local storage."}, nil, Write, SourceName, ""},
		// a guest agent acts inside the machine as root
		{"guest agent exec", Tool{Name: "vm_agent_exec"}, nil, Exec, SourceName, ""},
		{"guest agent file read", Tool{Name: "vm_agent_file_read"}, nil, Exec, SourceName, "guest agent"},
		{"guest agent password is the guest's", Tool{Name: "vm_agent_set_password"}, nil, Exec, SourceName, "guest agent"},
		{"guest agent info", Tool{Name: "vm_agent_get_info"}, nil, Read, SourceName, ""},
		{"guest agent status", Tool{Name: "vm_agent_exec_status"}, nil, Read, SourceName, ""},
	})
}

func TestClassifyDescription(t *testing.T) {
	runClassify(t, []classifyCase{
		{"verb from the description when the name has none", Tool{Name: "notification_target_test", Description: "Send a test notification."}, nil, Write, SourceDescription, `"send"`},
		{"adverb before the verb", Tool{Name: "guest_power", Description: "Gracefully shut down the guest."}, nil, Destructive, SourceDescription, `"shut"`},
		{"name verb wins over the description verb", Tool{Name: "get_report", Description: "Generate a system report."}, nil, Read, SourceName, ""},
		{"irreversible", Tool{Name: "convert_vm_to_template", Description: "Convert a VM into a template (irreversible)."}, nil, Destructive, SourceDescription, "irreversible"},
		{"destroys data", Tool{Name: "make_partition_table", Description: "Write a partition table (WARNING: destroys all data)."}, nil, Destructive, SourceDescription, ""},
		{"destructive phrase ignored for a read", Tool{Name: "get_trash", Description: "List items that will be permanently deleted."}, nil, Read, SourceName, ""},
		{"exec phrase", Tool{Name: "do_task", Description: "Connects to the host and executes a shell command."}, nil, Exec, SourceDescription, "runs a command"},
		{"arbitrary call", Tool{Name: "proxy", Description: "Make an arbitrary API call."}, nil, Exec, SourceDescription, ""},
		{"keystrokes", Tool{Name: "send_key", Description: "Send a key event to a VM (e.g. ctrl-alt-del)."}, nil, Exec, SourceDescription, "keystrokes"},
		{"credentials in the summary", Tool{Name: "update_cloudinit", Description: "Set Cloud-Init parameters (user, password, SSH keys)."}, nil, Admin, SourceDescription, `"password"`},
		{"credentials only in the argument list", Tool{Name: "create_container", Description: "Create a new container.\n\nArgs:\n    password: Root password."}, nil, Write, SourceName, ""},
		{"credentials in a read", Tool{Name: "get_permissions", Description: "Check effective permissions for a user."}, nil, Read, SourceName, ""},
		{"global settings", Tool{Name: "set_flags", Description: "Set a global flag."}, nil, Admin, SourceDescription, "global"},
		{"all nodes", Tool{Name: "apply_changes", Description: "Apply pending changes to all nodes."}, nil, Admin, SourceDescription, ""},
		{"guest agent descriptions name the guest's credentials", Tool{Name: "vm_agent_set_password", Description: "Set a user password inside a VM."}, nil, Exec, SourceName, ""},
	})
}

func TestClassifySchema(t *testing.T) {
	schema := func(s string) Tool { return Tool{Name: "http_request", InputSchema: []byte(s)} }
	runClassify(t, []classifyCase{
		{"enum offers DELETE", schema(`{"properties":{"method":{"type":"string","enum":["GET","POST","DELETE"]}}}`), nil, Destructive, SourceSchema, `"DELETE"`},
		{"enum offers lowercase delete", schema(`{"properties":{"http_method":{"enum":["get","delete"]}}}`), nil, Destructive, SourceSchema, ""},
		{"enum offers POST and PUT", schema(`{"properties":{"method":{"enum":["GET","POST","PUT"]}}}`), nil, Write, SourceSchema, ""},
		{"enum offers GET only", schema(`{"properties":{"method":{"enum":["GET","HEAD"]}}}`), nil, Read, SourceSchema, ""},
		{"anyOf consts", schema(`{"properties":{"action":{"anyOf":[{"const":"start"},{"const":"stop"}]}}}`), nil, Destructive, SourceSchema, `"stop"`},
		{"array items enum", schema(`{"properties":{"operations":{"type":"array","items":{"enum":["read","remove"]}}}}`), nil, Destructive, SourceSchema, ""},
		{"values listed in the description", schema(`{"properties":{"method":{"type":"string","description":"HTTP method: 'get', 'post', 'put', 'delete'."}}}`), nil, Destructive, SourceSchema, ""},
		{"uppercase methods in the description", schema(`{"properties":{"method":{"type":"string","description":"One of GET, POST."}}}`), nil, Write, SourceSchema, ""},
		{"firewall verdicts are not operations", schema(`{"properties":{"action":{"enum":["ACCEPT","DROP","REJECT"]}}}`), nil, Write, SourceDefault, ""},
		{"enum on a non-method argument is ignored", schema(`{"properties":{"mode":{"enum":["snapshot","stop"]}}}`), nil, Write, SourceDefault, ""},
		{"name verb beats a less risky schema", Tool{Name: "delete_thing", InputSchema: []byte(`{"properties":{"method":{"enum":["POST"]}}}`)}, nil, Destructive, SourceName, ""},
		{"schema beats a less risky name", Tool{Name: "call_endpoint", InputSchema: []byte(`{"properties":{"method":{"enum":["GET","DELETE"]}}}`), Description: "Call an endpoint."}, nil, Destructive, SourceSchema, ""},
		{"creating on a block device formats it", Tool{Name: "create_pool", InputSchema: []byte(`{"properties":{"device":{"type":"string","description":"Block device path (e.g. '/dev/sdb')."}}}`)}, nil, Destructive, SourceSchema, "block device"},
		{"reading a block device is a read", Tool{Name: "get_disk_smart", InputSchema: []byte(`{"properties":{"disk":{"type":"string","description":"Disk device path (e.g. '/dev/sda')."}}}`)}, nil, Read, SourceName, ""},
		{"a disk name is not a block device", Tool{Name: "resize_disk", InputSchema: []byte(`{"properties":{"disk":{"type":"string","description":"Disk name (e.g. 'scsi0')."}}}`)}, nil, Write, SourceName, ""},
		{"boolean delete flags do not count", Tool{Name: "update_config", InputSchema: []byte(`{"properties":{"delete":{"type":"string"}}}`)}, nil, Write, SourceName, ""},
		{"malformed schema is ignored", Tool{Name: "get_x", InputSchema: []byte(`{"properties":[1,2]}`)}, nil, Read, SourceName, ""},
		{"malformed property is ignored", schema(`{"properties":{"method":"DELETE"}}`), nil, Write, SourceDefault, ""},
	})
}

func TestClassifyDefault(t *testing.T) {
	runClassify(t, []classifyCase{
		{"no signal at all", Tool{Name: "frobnicate"}, nil, Write, SourceDefault, "assumed to write"},
		{"description without a verb", Tool{Name: "widget", Description: "The widget tool."}, nil, Write, SourceDefault, ""},
		{"punctuation only", Tool{Name: "__"}, nil, Write, SourceDefault, ""},
		{"empty tool", Tool{}, nil, Write, SourceDefault, ""},
	})
}

// Familiar tools of other MCP servers: the word lists are not Proxmox's.
func TestClassifyOtherServers(t *testing.T) {
	runClassify(t, []classifyCase{
		{"filesystem read_file", Tool{Name: "read_file"}, nil, Read, SourceName, ""},
		{"filesystem write_file", Tool{Name: "write_file"}, nil, Write, SourceName, ""},
		{"filesystem move_file", Tool{Name: "move_file"}, nil, Write, SourceName, ""},
		{"github search_code", Tool{Name: "search_code"}, nil, Read, SourceName, ""},
		{"github merge_pull_request", Tool{Name: "merge_pull_request"}, nil, Write, SourceName, ""},
		{"github delete_file", Tool{Name: "delete_file"}, nil, Destructive, SourceName, ""},
		{"shell run_command", Tool{Name: "run_command"}, nil, Exec, SourceName, ""},
		{"playwright browser_evaluate", Tool{Name: "browser_evaluate"}, nil, Exec, SourceName, ""},
		{"postgres query", Tool{Name: "query", Description: "Run a read-only SQL query."}, nil, Read, SourceName, ""},
		{"kubernetes delete_pod", Tool{Name: "delete_pod"}, nil, Destructive, SourceName, ""},
		{"kubernetes scale_deployment", Tool{Name: "scale_deployment"}, nil, Write, SourceName, ""},
		{"slack post_message", Tool{Name: "slack_post_message"}, nil, Write, SourceName, ""},
		{"cloud createAccessKey", Tool{Name: "createAccessKey"}, nil, Admin, SourceName, ""},
		{"auth reset_password", Tool{Name: "reset_password"}, nil, Admin, SourceName, ""},
	})
}

func TestCategoryOrder(t *testing.T) {
	cs := Categories()
	require.Equal(t, []Category{Read, Write, Destructive, Exec, Admin}, cs)
	for i, c := range cs {
		assert.Equal(t, i, c.Rank())
		assert.True(t, c.Valid())
		for _, d := range cs[:i] {
			assert.True(t, c.Riskier(d), "%s > %s", c, d)
			assert.False(t, d.Riskier(c))
		}
	}
	assert.Equal(t, -1, Category("bogus").Rank())
	assert.False(t, Category("").Valid())
}

func TestSeverities(t *testing.T) {
	assert.Equal(t, map[Category]Severity{
		Read: SeverityInfo, Write: SeverityLow, Destructive: SeverityHigh, Exec: SeverityHigh, Admin: SeverityCritical,
	}, map[Category]Severity{
		Read: Read.Severity(), Write: Write.Severity(), Destructive: Destructive.Severity(), Exec: Exec.Severity(), Admin: Admin.Severity(),
	})
	for i, s := range Severities() {
		assert.Equal(t, i, s.Rank())
		got, err := ParseSeverity(" " + string(s) + " ")
		require.NoError(t, err)
		assert.Equal(t, s, got)
	}
	_, err := ParseSeverity("severe")
	require.EqualError(t, err, `unknown severity "severe" (allowed: info, low, medium, high, critical)`)
}

func TestParseCategory(t *testing.T) {
	for _, in := range []string{"read", "READ", " Read "} {
		c, err := ParseCategory(in)
		require.NoError(t, err)
		assert.Equal(t, Read, c)
	}
	_, err := ParseCategory("nuke")
	require.EqualError(t, err, `unknown category "nuke" (allowed: read, write, destructive, exec, admin)`)
}

func TestSources(t *testing.T) {
	assert.Equal(t, []Source{"override", "annotation", "name", "description", "schema", "default"}, Sources())
}

func TestTokenize(t *testing.T) {
	tests := map[string][]string{
		"get_vm_status":    {"get", "vm", "status"},
		"getVMStatus":      {"get", "vm", "status"},
		"HTTPServerList":   {"http", "server", "list"},
		"list-nodes.v2":    {"list", "nodes", "v2"},
		"net0Config":       {"net0", "config"},
		"stopall_node":     {"stop", "all", "node"},
		"firewall_install": {"firewall", "install"},
		"ÜberTool":         {"über", "tool"},
		"":                 nil,
		"__":               nil,
	}
	for in, want := range tests {
		assert.Equal(t, want, tokenize(in), in)
	}
}
