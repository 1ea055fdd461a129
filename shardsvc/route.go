package shardsvc

import (
	"strings"

	"github.com/mcptrail/mcptrail/api"
)

// RequestServer is the server a request is about, or whether it spans
// servers (and so goes to every shard).
func RequestServer(req api.Request) (srv string, spans bool) {
	switch r := req.(type) {
	case *api.RecommendRequest:
		return r.Server, false
	case *api.ReplayRequest:
		return r.Server, false
	case *api.BacktestRequest:
		return r.Server, false
	case *api.CatalogImportRequest:
		return r.Server, false
	case *api.CatalogListRequest:
		return r.Server, false
	case *api.FindingsRequest:
		return r.Server, false
	case *api.ForgetRequest:
		return r.Server, false
	case *api.SuppressRequest:
		if r.Server == "" {
			return findingServer(r.FindingID), false
		}
		return r.Server, false
	case *api.UnsuppressRequest:
		return findingServer(r.FindingID), false
	case *api.ReportRequest:
		return r.Server, r.Server == ""
	case *api.PoliciesRequest:
		return r.Server, r.Server == ""
	case *api.QueryRequest:
		return r.Params["server"], r.Params["server"] == ""
	case *api.SuppressionsRequest:
		return "", true
	}
	return "", false
}

// findingServer is the server a finding id names (kind:server:grant:subject,
// recommend.FindingID), "" for an id of another shape.
func findingServer(id string) string {
	parts := strings.SplitN(id, ":", 3)
	if len(parts) < 3 {
		return ""
	}
	return parts[1]
}
