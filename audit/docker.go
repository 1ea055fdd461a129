package audit

// docker decodes a docker/mcp-gateway policy AuditEvent. Only tool targets
// are tool calls; server and prompt events are skipped.
func (d *decoder) docker(res *Result, fs []field) error {
	src := d.src
	for _, f := range fs {
		if f.key != "target_type" {
			continue
		}
		var tt string
		if err := setString(src, f, &tt); err != nil {
			return prefixed(err, "docker/mcp-gateway event: ")
		}
		if tt != "" && tt != "tool" {
			res.Kind, res.Skipped = KindSkipped, "target_type "+clip(tt)
			return nil
		}
	}
	e := &res.Event
	var outcome string
	var ubuf [16]int
	unknown := ubuf[:0]
	for i, f := range fs {
		var err error
		switch f.key {
		case "server_name":
			err = setString(src, f, &e.Server)
		case "tool_name":
			err = setString(src, f, &e.Tool)
		case "result":
			err = setString(src, f, (*string)(&e.Decision))
		case "outcome_reason":
			err = setString(src, f, &outcome)
		case "reason":
			err = setString(src, f, &e.Reason)
		case "policy_id":
			err = setStringOrNumber(src, f, &e.Rule)
		case "policy_version":
			err = setStringOrNumber(src, f, &e.PolicyVersion)
		case "client_name":
			err = setString(src, f, &e.Agent)
		case "session_id":
			err = setString(src, f, &e.Session)
		case "timestamp":
			err = setTS(src, f, &e.TS)
		case "target_type":
		default:
			if f.kind(src) == '"' {
				unknown = append(unknown, i)
			}
		}
		if err != nil {
			return prefixed(err, "docker/mcp-gateway event: ")
		}
	}
	// Prefer the human-readable reason; keep the outcome class as an attr.
	if e.Reason == "" {
		e.Reason = outcome
	}
	if len(unknown) > 0 {
		e.Attrs = d.buildAttrs(src, fs, unknown, -1)
	}
	if outcome != "" && e.Reason != outcome {
		if e.Attrs == nil {
			e.Attrs = make(map[string]string, 1)
		}
		e.Attrs["outcome_reason"] = outcome
	}
	e.Method = DefaultMethod
	if err := d.finish(e, true); err != nil {
		return prefixed(err, "docker/mcp-gateway event: ")
	}
	return nil
}
