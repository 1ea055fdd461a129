package audit

import "strings"

// InterceptServers resolves the server of Intercept tool_call events from
// their instance's startup line. Decode runs in parallel, so the resolution
// is a separate, sequential step: call Apply on every Result in input order.
// The zero value is ready to use; it is not safe for concurrent use. Use one
// per input stream (instance ids are random per Intercept process).
type InterceptServers struct {
	servers map[string]string // instance → server named by its startup line
}

// Apply records a startup line, or fills the server of an Intercept tool_call
// event from its instance's startup line when opts.Server is empty. It
// returns a *Rejection: missing_server when no startup line named the
// server, bad_field when the name is not a valid server name (a URL). Results of other formats and kinds are left alone.
func (r *InterceptServers) Apply(res *Result, opts Options) error {
	switch {
	case res.Kind == KindInterceptStartup:
		if r.servers == nil {
			r.servers = make(map[string]string)
		}
		// Clones: with Options.Borrow the strings alias a payload that
		// this map would otherwise keep alive for the whole stream.
		r.servers[strings.Clone(res.Instance)] = strings.Clone(res.InstanceServer)
	case res.Kind == KindEvent && res.Format == FormatIntercept:
		if opts.Server != "" {
			res.Event.Server = opts.Server
			return nil
		}
		if res.Event.Server != "" {
			return nil
		}
		srv, ok := r.servers[res.Event.Gateway]
		switch {
		case !ok:
			return reject(ReasonMissingServer,
				"no startup line for Intercept instance %q before this tool_call; pass --server NAME", clip(res.Event.Gateway))
		case srv == "":
			return reject(ReasonMissingServer,
				"the startup line of Intercept instance %q names no server; pass --server NAME", clip(res.Event.Gateway))
		}
		if why := badServerName(srv); why != "" {
			return reject(ReasonBadField, "the startup line of Intercept instance %q names the server %q: %s; pass --server NAME",
				clip(res.Event.Gateway), clip(srv), why)
		}
		res.Event.Server = srv
	}
	return nil
}

// Server returns the server that instance's startup line named.
func (r *InterceptServers) Server(instance string) (string, bool) {
	s, ok := r.servers[instance]
	return s, ok
}
