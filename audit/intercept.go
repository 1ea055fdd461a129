package audit

// intercept decodes a PolicyLayer Intercept JSONL line: tool_call lines become
// events, startup lines feed InterceptServers, other types are skipped.
func (d *decoder) intercept(res *Result, fs []field) error {
	src := d.src
	// The type decides which fields matter: a heartbeat is skipped whatever
	// else it carries.
	var typ, inst string
	for _, f := range fs {
		var err error
		switch f.key {
		case "type":
			err = setString(src, f, &typ)
		case "instance":
			err = setString(src, f, &inst)
		}
		if err != nil {
			return prefixed(err, "Intercept line: ")
		}
	}
	switch typ {
	case "":
		return reject(ReasonBadField, `Intercept line has no "type" (want startup, tool_call, heartbeat, …)`)
	case "startup":
		return d.interceptStartup(res, fs, inst)
	case "tool_call":
		return d.interceptToolCall(res, fs, inst)
	}
	res.Kind, res.Skipped = KindSkipped, typ
	return nil
}

func (d *decoder) interceptStartup(res *Result, fs []field, inst string) error {
	if inst == "" {
		return reject(ReasonBadField, `Intercept startup line has no "instance"`)
	}
	var server string
	for _, f := range fs {
		if f.key == "server" {
			if err := setString(d.src, f, &server); err != nil {
				return prefixed(err, "Intercept startup line: ")
			}
		}
	}
	if len(inst) > d.opts.MaxFieldBytes {
		return tooLong("instance", len(inst), d.opts.MaxFieldBytes)
	}
	if len(server) > d.opts.MaxFieldBytes {
		return tooLong("server", len(server), d.opts.MaxFieldBytes)
	}
	res.Kind, res.Instance, res.InstanceServer = KindInterceptStartup, inst, server
	return nil
}

func (d *decoder) interceptToolCall(res *Result, fs []field, inst string) error {
	src := d.src
	e := &res.Event
	var result string
	var ubuf [8]int
	unknown := ubuf[:0]
	for i, f := range fs {
		var err error
		switch f.key {
		case "ts":
			err = setTS(src, f, &e.TS)
		case "tool":
			err = setString(src, f, &e.Tool)
		case "result":
			err = setString(src, f, &result)
		case "rule":
			err = setString(src, f, &e.Rule)
		case "message":
			err = setString(src, f, &e.Reason)
		case "args_hash":
			err = setString(src, f, &e.ArgsHash)
		case "type", "instance", "server", "config", "pid", "state_backend", "fail_mode", "status", "counters":
			// known Intercept fields that do not belong to a tool call
		default:
			if f.kind(src) == '"' {
				unknown = append(unknown, i)
			}
		}
		if err != nil {
			return prefixed(err, "Intercept tool_call: ")
		}
	}
	e.Gateway = inst
	e.Method = DefaultMethod
	e.Decision = interceptDecision(result, e.Rule, e.Reason)
	if len(unknown) > 0 {
		e.Attrs = d.buildAttrs(src, fs, unknown, -1)
	}
	// Without --server the server comes from the instance's startup line,
	// which InterceptServers.Apply resolves in file order.
	if err := d.finish(e, d.opts.Server != ""); err != nil {
		return prefixed(err, "Intercept tool_call: ")
	}
	return nil
}

// interceptInternalError is the message of Intercept's refusal when it
// could not reserve a counter (a state store error, an increment it could
// not read): no rate limit was reached.
const interceptInternalError = "Internal policy error"

// interceptDecision maps Intercept's result (allowed|denied, decided before
// the upstream call) to a decision. Intercept denies hidden tools with rule
// "(hidden)"; a refusal with no rule comes from its counters (a rate limit
// reached at reservation), whose message is the limit's own on_deny, any
// text, or "Rate limit exceeded for …", except interceptInternalError.
func interceptDecision(result, rule, message string) Decision {
	if result != string(Denied) {
		return Decision(result) // allowed, or whatever validation rejects
	}
	switch {
	case rule == "(hidden)":
		return Hidden
	case rule == "" && message != interceptInternalError:
		return RateLimited
	}
	return Denied
}
