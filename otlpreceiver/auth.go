package otlpreceiver

import (
	"net/http"
	"path/filepath"

	"github.com/mcptrail/mcptrail/api"
)

// requireToken admits a request with the exporters' token, or with the
// daemon's API token (warned about once: an exporter holding it holds what
// may also query and change the store).
func (rc *Receiver) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		switch {
		case api.BearerOK(auth, rc.o.Token):
		case api.BearerOK(auth, rc.o.APIToken):
			rc.apiTokenSeen.Do(func() {
				rc.o.Log.Warn("an exporter sends the daemon's API token, which may also query and change the store: "+
					"give it the OTLP token instead (otlp.token, or the file otlp.token_file), which may only send telemetry",
					"remote", r.RemoteAddr)
			})
		default:
			api.Unauthorized(w, "mcptrail otlp", "the OTLP token (otlp.token, or the file otlp.token_file)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// TokenFileName is the default otlp.token_file, beside the database.
const TokenFileName = "mcptrail-otlp.token"

// DefaultTokenFile is where the exporters' token lives when otlp.token_file
// is not set.
func DefaultTokenFile(databasePath string) string {
	return filepath.Join(filepath.Dir(databasePath), TokenFileName)
}
