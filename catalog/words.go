package catalog

import (
	"strings"
	"unicode"
)

// The word lists below carry the classifier's judgement. They are written for
// what the words mean to an operator of the system behind an MCP server, not
// for any one server: a change here changes every catalog's classification,
// and TestProxmoxAgreement measures the effect on a reviewed catalog.

// verbs maps an action word to the category of the action it names.
var verbs = map[string]Category{
	// Reading: no state changes. "download" reads unless it downloads *to*
	// somewhere on the server (see downloadsInto).
	"get": Read, "list": Read, "read": Read, "show": Read, "describe": Read,
	"fetch": Read, "search": Read, "find": Read, "lookup": Read, "query": Read,
	"check": Read, "view": Read, "inspect": Read, "count": Read, "dump": Read,
	"download": Read, "scan": Read, "watch": Read, "poll": Read, "browse": Read,
	"preview": Read, "validate": Read, "verify": Read, "diff": Read, "compare": Read,
	"estimate": Read, "calculate": Read, "resolve": Read, "ping": Read, "export": Read,
	"extract": Read, "retrieve": Read, "explain": Read, "tail": Read, "stat": Read,

	// Writing: state changes that can be changed back. Pausing and cancelling
	// are reversible; starting something consumes resources but loses nothing.
	"create": Write, "add": Write, "new": Write, "make": Write, "insert": Write,
	"update": Write, "set": Write, "put": Write, "post": Write, "patch": Write,
	"edit": Write, "modify": Write, "change": Write, "replace": Write, "rename": Write,
	"move": Write, "copy": Write, "clone": Write, "migrate": Write, "relocate": Write,
	"resize": Write, "allocate": Write, "upload": Write, "import": Write, "register": Write,
	"enable": Write, "disable": Write, "configure": Write, "apply": Write, "assign": Write,
	"attach": Write, "detach": Write, "mount": Write, "unmount": Write, "start": Write,
	"resume": Write, "unpause": Write, "suspend": Write, "pause": Write, "freeze": Write,
	"unfreeze": Write, "send": Write, "notify": Write, "sync": Write, "join": Write,
	"leave": Write, "order": Write, "renew": Write, "manage": Write, "restore": Write,
	"install": Write, "upgrade": Write, "refresh": Write, "reload": Write, "schedule": Write,
	"trigger": Write, "wake": Write, "lock": Write, "unlock": Write, "approve": Write,
	"submit": Write, "write": Write, "save": Write, "publish": Write, "deploy": Write,
	"scale": Write, "tag": Write, "label": Write, "convert": Write, "generate": Write,
	"mark": Write, "merge": Write, "push": Write, "commit": Write, "link": Write,
	"unlink": Write, "bind": Write, "grant": Write, "revoke": Write, "invite": Write,
	"cancel": Write, "abort": Write, "reply": Write, "comment": Write, "archive": Write,

	// Destroying: data or availability is lost. Powering a machine off or
	// restarting it drops its service and any unsaved state, so stop, shutdown,
	// reboot and restart count here rather than next to start.
	"delete": Destructive, "del": Destructive, "remove": Destructive, "rm": Destructive,
	"destroy": Destructive, "purge": Destructive, "rollback": Destructive, "revert": Destructive,
	"reset": Destructive, "wipe": Destructive, "erase": Destructive, "format": Destructive,
	"initialize": Destructive, "prune": Destructive, "drop": Destructive, "truncate": Destructive,
	"kill": Destructive, "terminate": Destructive, "stop": Destructive, "shutdown": Destructive,
	"shut": Destructive, "reboot": Destructive, "restart": Destructive, "halt": Destructive,
	"poweroff": Destructive, "uninstall": Destructive, "clear": Destructive, "flush": Destructive,
	"overwrite": Destructive, "evict": Destructive, "deregister": Destructive,
	"unregister": Destructive, "discard": Destructive, "expunge": Destructive, "shred": Destructive,

	// Executing: arbitrary code or commands. "run" is weak (see runTakesCode):
	// "run_apt_update" runs one fixed operation.
	"exec": Exec, "execute": Exec, "eval": Exec, "evaluate": Exec, "run": Exec,
	"spawn": Exec, "invoke": Exec, "sudo": Exec,
}

// codeNouns make a mutating action an exec: sending a command, running a script.
var codeNouns = set("command", "cmd", "script", "shell", "code", "program", "process", "sql", "expression", "snippet")

// consoleNouns make any tool an exec, whatever its verb: handing out a console
// (even "getting" a VNC ticket) gives interactive keyboard and screen control.
var consoleNouns = set("console", "terminal", "tty", "pty", "repl", "vnc", "spice", "vncproxy", "spiceproxy", "termproxy", "vncwebsocket")

// rawNouns next to "raw" mark a pass-through to the underlying API: any call,
// any method, so a superset of every other tool.
var rawNouns = set("api", "request", "call", "http", "query", "sql", "command", "cmd", "endpoint")

// adminNouns are the objects of access control: identities, credentials,
// privileges, network exposure, cluster membership and host services. Changing
// them (any non-read verb) changes who can reach or do what, so it is admin.
var adminNouns = set(
	"user", "account", "role", "acl", "permission", "privilege", "password", "passwd",
	"passphrase", "token", "credential", "secret", "auth", "authentication", "authorization",
	"tfa", "mfa", "otp", "totp", "realm", "certificate", "cert", "firewall", "ipset",
	"sshkey", "apikey", "accesskey", "ssh", "sudoer", "iam", "sso", "oauth", "oidc", "saml", "ldap",
	"login", "cluster", "service", "network",
)

// "group" alone is a user group (access control); qualified by another noun
// ("ha_group", "resource_group") it is an ordinary object.
const weakAdminNoun = "group"

// machineNouns before "agent" name an agent running inside a machine (a guest
// agent): it acts there as root, so anything beyond a status query is exec and
// the nouns after it (password, file) are the guest's, not the control plane's.
var machineNouns = set("vm", "guest", "qemu", "container", "lxc", "instance", "host", "node", "machine", "pod")

// fileNouns through a guest agent are raw filesystem access inside the guest.
var fileNouns = set("file", "fs", "filesystem")

// resultNouns at the end of a name without a leading verb make it a query
// about what precedes: "vm_agent_exec_status" is the status of an exec.
var resultNouns = set("status", "result", "output", "info", "log", "progress", "state")

// methodArgs are argument names whose values are the operation to perform.
var methodArgs = set("method", "verb", "action", "operation", "op")

// enumVerdicts are firewall-like verdicts, not operations, and never count.
var enumVerdicts = set("accept", "drop", "reject", "deny", "allow")

// httpMethods classify the values of a method argument.
var httpMethods = map[string]Category{
	"get": Read, "head": Read, "options": Read,
	"post": Write, "put": Write, "patch": Write,
	"delete": Destructive,
}

// deviceArgs take a block device; creating something on a raw device formats
// it, so a mutating tool with one is destructive.
var deviceArgs = set("dev", "device", "devices", "blockdev", "disk", "disks")

// stopWords carry no meaning for classification.
var stopWords = set("a", "an", "the", "to", "of", "for", "in", "on", "by", "with", "from", "into", "and", "or", "all", "bulk")

func set(words ...string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[w] = true
	}
	return m
}

// has reports whether the word, or its singular, is in the set.
func has(m map[string]bool, w string) bool { return m[w] || m[singular(w)] }

// singular strips a plural ending well enough for the noun lists.
func singular(w string) string {
	switch {
	case len(w) > 4 && strings.HasSuffix(w, "ies"):
		return w[:len(w)-3] + "y"
	case len(w) > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us"):
		return w[:len(w)-1]
	}
	return w
}

// tokenize splits a tool name (or a sentence) into lower-case words at
// non-alphanumerics and camel-case boundaries: "getVMStatus" and "get_vm_status"
// both give [get vm status]. A verb glued to "all" ("stopall") is split, since
// stopping everything is still stopping.
func tokenize(s string) []string {
	var toks []string
	var cur []rune
	flush := func() {
		if len(cur) > 0 {
			toks = append(toks, splitAll(string(cur))...)
			cur = cur[:0]
		}
	}
	rs := []rune(s)
	for i, r := range rs {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			flush()
			continue
		}
		if i > 0 && unicode.IsUpper(r) {
			prev := rs[i-1]
			nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
				flush()
			}
		}
		cur = append(cur, unicode.ToLower(r))
	}
	flush()
	return toks
}

func splitAll(w string) []string {
	if p, ok := strings.CutSuffix(w, "all"); ok && len(p) >= 3 {
		if _, isVerb := verbs[p]; isVerb {
			return []string{p, "all"}
		}
	}
	return []string{w}
}
