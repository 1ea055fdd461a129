package catalog

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Classification is the risk verdict for one tool.
type Classification struct {
	Tool     string   `json:"tool"`
	Category Category `json:"category"`
	Severity Severity `json:"severity"`
	Source   Source   `json:"source"`
	Why      string   `json:"why"`
}

// Classify decides a tool's category by the SPEC's order:
//
//  1. an override for the tool wins (source "override");
//  2. then explicit MCP annotations (source "annotation"): readOnlyHint true is
//     read, destructiveHint true is destructive, readOnlyHint false with
//     destructiveHint false is write. Absent hints are not read as MCP's
//     worst-case defaults; they leave the decision to the signals below.
//     A server's hints raise a tool but never lower it below a destructive,
//     exec or admin signal of the heuristics below (they are the server's
//     word, which only a user's override outranks);
//  3. then the riskiest of the heuristic signals: the verbs and nouns of the
//     name (source "name"), phrases of the description's summary (source
//     "description") and the input schema (source "schema": a method-like
//     argument offering DELETE, a raw block-device argument). On a tie the
//     earlier source in that list is reported;
//  4. otherwise "default": write. An unknown tool is assumed to change state,
//     because calling a writer read would hide it from risk review, while
//     calling a reader write costs only a look.
//
// Classify never fails: a malformed schema or an unknown override category is
// ignored (LoadOverrides rejects the latter). It only reads package state, so
// it is safe for concurrent use.
func Classify(t Tool, overrides Overrides) Classification {
	var s signal
	if o, ok := overrides[t.Name]; ok && o.Category.Valid() {
		why := o.Why
		if why == "" {
			why = "set by override"
		}
		s = signal{o.Category, SourceOverride, why}
	} else {
		h := heuristics(t)
		if a, ok := annotationSignal(t.Annotations, h); ok {
			s = a
		} else if h.cat != "" {
			s = h
		} else {
			s = signal{Write, SourceDefault, "no annotation, name, description or schema signal: an unknown tool is assumed to write"}
		}
	}
	return Classification{Tool: t.Name, Category: s.cat, Severity: s.cat.Severity(), Source: s.src, Why: s.why}
}

// signal is one piece of evidence for a category.
type signal struct {
	cat Category
	src Source
	why string
}

// riskiest returns the riskiest signal; the first one wins a tie.
func riskiest(sigs []signal) signal {
	var best signal
	for _, s := range sigs {
		if s.cat != "" && (best.cat == "" || s.cat.Riskier(best.cat)) {
			best = s
		}
	}
	return best
}

func annotationSignal(a *Annotations, h signal) (signal, bool) {
	if a == nil {
		return signal{}, false
	}
	isTrue := func(b *bool) bool { return b != nil && *b }
	isFalse := func(b *bool) bool { return b != nil && !*b }
	ro, de := a.ReadOnlyHint, a.DestructiveHint

	var base signal
	switch {
	case isTrue(ro) && isTrue(de):
		// MCP says destructiveHint means nothing on a read-only tool, but a
		// server that sets both is confused; the riskier reading is the safe one.
		return signal{Destructive, SourceAnnotation, "contradictory annotations readOnlyHint=true and destructiveHint=true: taking the riskier"}, true
	case isTrue(ro):
		base = signal{Read, SourceAnnotation, "annotation readOnlyHint=true"}
	case isTrue(de):
		base = signal{Destructive, SourceAnnotation, "annotation destructiveHint=true"}
	case isFalse(ro) && isFalse(de):
		base = signal{Write, SourceAnnotation, "annotations readOnlyHint=false, destructiveHint=false"}
	case isFalse(ro):
		base = signal{Write, SourceAnnotation, "annotation readOnlyHint=false"}
	case isFalse(de):
		// Only rules destruction out; anything else is for the other signals.
		if h.cat != Destructive {
			return signal{}, false
		}
		base = signal{Write, SourceAnnotation, "annotation destructiveHint=false"}
	default:
		return signal{}, false
	}
	// A server's hints may raise a tool, never lower it below what its
	// name, description or arguments call destructive, exec or admin: MCP
	// holds an untrusted server's annotations to decide nothing, and a
	// least-privilege proposal must not drop a gate on its word (a user's
	// override may). Annotations cannot say exec or admin in any case.
	if h.cat.Riskier(Write) && h.cat.Riskier(base.cat) {
		h.why += " (" + base.why + " does not lower it)"
		return h, true
	}
	return base, true
}

// nameFacts is what the tool name says.
type nameFacts struct {
	toks   []string
	verb   string   // the action word, "" when the name has none
	action Category // its category
	// result: no leading verb and a trailing result noun ("vm_agent_exec_status").
	result bool
	// guest: an agent inside a machine ("vm_agent_…") performs the action.
	guest bool
}

func analyzeName(name string) nameFacts {
	toks := tokenize(name)
	f := nameFacts{toks: toks}
	if len(toks) == 0 {
		return f
	}
	for i, w := range toks {
		if w == "agent" && i > 0 && has(machineNouns, toks[i-1]) {
			f.guest = true
		}
	}
	last := toks[len(toks)-1]
	if c, ok := verbs[toks[0]]; ok {
		// A leading verb governs: later verb-like words are its objects
		// ("list_file_restore" lists restorable files). Only verbs chained by
		// "and"/"or" ("get_or_create") act too.
		f.verb, f.action = toks[0], c
		for i := 1; i+1 < len(toks) && (toks[i] == "and" || toks[i] == "or"); i += 2 {
			c2, ok := verbs[toks[i+1]]
			if !ok {
				break
			}
			if c2.Riskier(f.action) {
				f.verb, f.action = toks[i+1], c2
			}
		}
	} else if len(toks) > 1 && has(resultNouns, last) {
		f.verb, f.action, f.result = last, Read, true
	} else {
		// Noun-first names ("vm_agent_exec", "bulk_shutdown_guests"): the
		// riskiest verb anywhere.
		for _, w := range toks[1:] {
			if c, ok := verbs[w]; ok && (f.action == "" || c.Riskier(f.action)) {
				f.verb, f.action = w, c
			}
		}
	}
	if f.verb == "run" && !runTakesCode(toks) {
		f.action = Write
	}
	return f
}

// runTakesCode: "run" is exec when it runs code ("run_command", "run_script")
// or anything at all ("run"); "run_apt_update" runs one fixed operation.
func runTakesCode(toks []string) bool {
	objects := 0
	for _, w := range toks {
		if has(codeNouns, w) {
			return true
		}
		if w != "run" && !stopWords[w] {
			objects++
		}
	}
	return objects == 0
}

func heuristics(t Tool) signal {
	f := analyzeName(t.Name)
	summary := summaryOf(t.Description)

	action, verb, src := f.action, f.verb, SourceName
	why := ""
	if action == "" {
		// A name without a verb ("test_notification_target"): the summary
		// usually starts with one ("Send a test notification…").
		if v, c := leadVerb(summary); c != "" {
			action, verb, src = c, v, SourceDescription
			why = fmt.Sprintf("description starts with %q: %s", v, meaning[c])
		}
	} else if f.result {
		why = fmt.Sprintf("name ends in %q, a query about what precedes it: %s", verb, meaning[Read])
	}
	if action == Read && (verb == "download" || verb == "fetch" || verb == "pull") && downloadsInto(f.toks, summary) {
		action = Write
		why = fmt.Sprintf("verb %q fetches into server-side storage: %s", verb, meaning[Write])
	} else if verb == "run" && action == Write {
		why = fmt.Sprintf("verb %q of one fixed operation, not of code: %s", verb, meaning[Write])
	}
	var sigs []signal
	if action != "" {
		if why == "" {
			why = fmt.Sprintf("verb %q in the name %s", verb, meaning[action])
		}
		sigs = append(sigs, signal{action, src, why})
	}
	sigs = append(sigs, nounSignals(f, action, verb)...)
	sigs = append(sigs, descriptionSignals(summary, action, f.guest)...)
	sigs = append(sigs, schemaSignals(t.InputSchema, action)...)
	return riskiest(sigs)
}

var meaning = map[Category]string{
	Read:        "reads without changing state",
	Write:       "changes state",
	Destructive: "loses data or availability",
	Exec:        "runs arbitrary code or commands",
	Admin:       "changes access control",
}

func nounSignals(f nameFacts, action Category, verb string) []signal {
	var sigs []signal
	mutating := action != "" && action != Read
	for i, w := range f.toks {
		if has(consoleNouns, w) {
			sigs = append(sigs, signal{Exec, SourceName, fmt.Sprintf("noun %q: interactive console access to the machine", w)})
		}
		if w == "raw" && ((i > 0 && has(rawNouns, f.toks[i-1])) || (i+1 < len(f.toks) && has(rawNouns, f.toks[i+1]))) {
			sigs = append(sigs, signal{Exec, SourceName, "a raw API pass-through: any call, any method"})
		}
	}
	if f.guest {
		if f.result {
			return sigs
		}
		files := slices.ContainsFunc(f.toks, func(w string) bool { return has(fileNouns, w) })
		if mutating || files {
			sigs = append(sigs, signal{Exec, SourceName, "acts inside the machine through its guest agent (as root): code execution there"})
		}
		// The nouns that follow are the guest's (its users, its files), not
		// the control plane's, so the admin nouns below do not apply.
		return sigs
	}
	if !mutating {
		return sigs
	}
	var nouns []string
	for _, w := range f.toks {
		if w == verb || stopWords[w] {
			continue
		}
		nouns = append(nouns, w)
	}
	for i, w := range nouns {
		// Two-word nouns: "api_key", "ssh_key", "access_key".
		if i+1 < len(nouns) && has(adminNouns, w+nouns[i+1]) {
			w += nouns[i+1]
		}
		switch {
		case has(codeNouns, w):
			sigs = append(sigs, signal{Exec, SourceName, fmt.Sprintf("verb %q with noun %q: runs a command or code", verb, w)})
		case has(adminNouns, w):
			sigs = append(sigs, signal{Admin, SourceName, fmt.Sprintf("verb %q on %q: %s", verb, w, meaning[Admin])})
		}
	}
	if len(nouns) == 1 && singular(nouns[0]) == weakAdminNoun {
		sigs = append(sigs, signal{Admin, SourceName, fmt.Sprintf("verb %q on a user group: %s", verb, meaning[Admin])})
	}
	return sigs
}

// summaryOf is the description's first paragraph, before any "Args:" list:
// it says what the tool does, while the argument list mentions things it can
// be given (a container "can" get a root password without being an admin tool).
func summaryOf(desc string) string {
	s := strings.ReplaceAll(desc, "\r\n", "\n")
	if i := strings.Index(s, "\n\n"); i >= 0 {
		s = s[:i]
	}
	for _, marker := range []string{"\nArgs:", "\nArguments:", "\nParameters:", "\nReturns:"} {
		if i := strings.Index(s, marker); i >= 0 {
			s = s[:i]
		}
	}
	return strings.Join(strings.Fields(s), " ")
}

// leadVerb finds the verb a summary starts with, allowing for a couple of
// leading adverbs ("Gracefully shut down…", "Hard-stop…").
func leadVerb(summary string) (string, Category) {
	toks := tokenize(summary)
	for i, w := range toks {
		if i >= 3 {
			break
		}
		if c, ok := verbs[w]; ok {
			if w == "run" && !runTakesCode(toks[i:min(len(toks), i+4)]) {
				c = Write
			}
			return w, c
		}
	}
	return "", ""
}

var intoStorage = regexp.MustCompile(`(?i)\b(?:to|into)\s+(?:the\s+|a\s+)?(?:local\s+|remote\s+|shared\s+)?(?:storage|disk|volume|datastore|bucket|server|node|host)\b`)

// downloadsInto: "download X to storage" makes the server fetch and store
// something, a write; a plain "download" hands data to the caller.
func downloadsInto(toks []string, summary string) bool {
	return slices.Contains(toks, "to") || slices.Contains(toks, "into") || intoStorage.MatchString(summary)
}

type phrase struct {
	re  *regexp.Regexp
	cat Category
	why string
}

// descPhrases are what a summary can add to the name. Exec phrases count
// whatever the verb; destructive and admin ones only for a tool that changes
// something, so that "Get the permissions…" stays a read.
var descPhrases = []phrase{
	{regexp.MustCompile(`(?i)\b(?:execut|run)\w*\s+(?:a\s+|an\s+|any\s+|arbitrary\s+)?(?:shell\s+)?(?:command|script|code|program)`), Exec, "description: runs a command"},
	{regexp.MustCompile(`(?i)\barbitrary\b[^.]{0,40}?\b(?:call|command|code|request|query|sql|api|endpoint)s?\b`), Exec, "description: an arbitrary call or command"},
	{regexp.MustCompile(`(?i)\bkey\s*(?:event|press|stroke)s?\b|\bkeystrokes?\b|\bkeyboard input\b`), Exec, "description: injects keystrokes into the machine's console"},
	{regexp.MustCompile(`(?i)\bconsole access\b|\binteractive (?:shell|console|terminal|session)\b|\bmonitor command\b`), Exec, "description: console or monitor access"},
	{regexp.MustCompile(`(?i)irreversib\w*|cannot be undone|can't be undone|\bpermanently\b|\bdestroys?\b|will be lost|\bdata loss\b|\ball data\b|\bwipes?\b|\berases?\b`), Destructive, "description: irreversible, data is lost"},
	{regexp.MustCompile(`(?i)\bpasswords?\b|\bpassphrases?\b|\bssh keys?\b|\bcredentials?\b|\bprivileges?\b|\bpermissions?\b|\bapi tokens?\b|\baccess control\b`), Admin, "description: sets credentials or privileges"},
	{regexp.MustCompile(`(?i)\bcluster-wide\b|\bdatacenter-wide\b|\bglobal\b|\ball nodes\b`), Admin, "description: changes global, cluster-wide settings"},
}

func descriptionSignals(summary string, action Category, guest bool) []signal {
	var sigs []signal
	for _, p := range descPhrases {
		if p.cat != Exec && (action == Read || (guest && p.cat == Admin)) {
			continue
		}
		if m := p.re.FindString(summary); m != "" {
			sigs = append(sigs, signal{p.cat, SourceDescription, fmt.Sprintf("%s (%q)", p.why, m)})
		}
	}
	return sigs
}

var quoted = regexp.MustCompile(`'([A-Za-z][A-Za-z_-]*)'|"([A-Za-z][A-Za-z_-]*)"|\b(GET|HEAD|OPTIONS|POST|PUT|PATCH|DELETE)\b`)

// schemaSignals reads the input schema's arguments: the operations a
// method-like argument offers (its enum, or the values its description lists,
// since generated schemas often lose enums), and raw block-device arguments of
// a mutating tool.
func schemaSignals(raw json.RawMessage, action Category) []signal {
	if len(raw) == 0 {
		return nil
	}
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(raw, &schema) != nil {
		return nil
	}
	names := make([]string, 0, len(schema.Properties))
	for n := range schema.Properties {
		names = append(names, n)
	}
	slices.Sort(names)

	var sigs []signal
	for _, n := range names {
		var prop map[string]any
		if json.Unmarshal(schema.Properties[n], &prop) != nil {
			continue
		}
		toks := tokenize(n)
		if len(toks) == 0 {
			continue
		}
		desc, _ := prop["description"].(string)
		if has(methodArgs, toks[len(toks)-1]) {
			values := enumValues(prop, 0)
			if len(values) == 0 {
				for _, m := range quoted.FindAllStringSubmatch(desc, -1) {
					values = append(values, m[1]+m[2]+m[3])
				}
			}
			var best signal
			for _, v := range values {
				if c := valueCategory(v); c != "" && (best.cat == "" || c.Riskier(best.cat)) {
					best = signal{c, SourceSchema, fmt.Sprintf("argument %q offers %q: %s", n, v, meaning[c])}
				}
			}
			if best.cat != "" {
				sigs = append(sigs, best)
			}
		}
		if action != "" && action != Read && slices.ContainsFunc(toks, func(w string) bool { return deviceArgs[w] }) {
			if d := strings.ToLower(desc); strings.Contains(d, "block device") || strings.Contains(d, "/dev/") || strings.Contains(d, "device path") {
				sigs = append(sigs, signal{Destructive, SourceSchema, fmt.Sprintf("argument %q is a raw block device, which creating on formats", n)})
			}
		}
	}
	return sigs
}

// enumValues collects the string values a JSON Schema property allows.
func enumValues(prop map[string]any, depth int) []string {
	if depth > 8 {
		return nil
	}
	var out []string
	if e, ok := prop["enum"].([]any); ok {
		for _, v := range e {
			if s, ok := v.(string); ok {
				out = append(out, s)
			}
		}
	}
	if s, ok := prop["const"].(string); ok {
		out = append(out, s)
	}
	for _, k := range []string{"oneOf", "anyOf"} {
		if alts, ok := prop[k].([]any); ok {
			for _, a := range alts {
				if m, ok := a.(map[string]any); ok {
					out = append(out, enumValues(m, depth+1)...)
				}
			}
		}
	}
	if items, ok := prop["items"].(map[string]any); ok {
		out = append(out, enumValues(items, depth+1)...)
	}
	return out
}

// valueCategory classifies one value of a method-like argument.
func valueCategory(v string) Category {
	w := strings.ToLower(strings.TrimSpace(v))
	if enumVerdicts[w] {
		return ""
	}
	if c, ok := httpMethods[w]; ok {
		return c
	}
	var best Category
	for _, t := range tokenize(w) {
		if c, ok := verbs[t]; ok && !enumVerdicts[t] && (best == "" || c.Riskier(best)) {
			best = c
		}
	}
	return best
}
