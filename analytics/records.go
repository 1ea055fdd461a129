package analytics

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ToolRecord is one tool of an imported catalog with its risk classification.
type ToolRecord struct {
	Server, Tool, Description string
	Annotations, InputSchema  json.RawMessage
	Category, Severity        string
	RiskSource, Why           string
	FirstSeen, LastSeen       time.Time // first and last import that listed the tool
}

// ImportCatalog records one catalog import: new tools get first_seen = at,
// known ones keep it and move last_seen; classifications are refreshed.
// It returns how many tools were new.
func (s *Store) ImportCatalog(ctx context.Context, server, source string, at time.Time, tools []ToolRecord) (added int, err error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("import catalog: %w", err)
	}
	defer conn.Close()
	// Stage the tools with the Appender, then upsert them in one statement:
	// row-by-row upserts took seconds for a few hundred tools.
	if _, err := conn.ExecContext(ctx, `CREATE OR REPLACE TEMP TABLE import_tools AS SELECT * FROM tools LIMIT 0`); err != nil {
		return 0, fmt.Errorf("import catalog: %w", err)
	}
	err = AppendRows(conn, "temp", "import_tools", tools, func(t *ToolRecord) []driver.Value {
		return []driver.Value{server, t.Tool, nullable(t.Description), rawJSONValue(t.Annotations), rawJSONValue(t.InputSchema),
			t.Category, t.Severity, t.RiskSource, nullable(t.Why), at.UTC(), at.UTC()}
	}, func(t *ToolRecord) string { return "tool " + t.Tool })
	if err != nil {
		return 0, fmt.Errorf("import catalog: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN TRANSACTION"); err != nil {
		return 0, fmt.Errorf("import catalog: %w", err)
	}
	defer func() {
		if err != nil {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	if err = conn.QueryRowContext(ctx, `SELECT count(*) FROM import_tools i ANTI JOIN tools t ON t.server = i.server AND t.tool = i.tool`).Scan(&added); err != nil {
		return 0, fmt.Errorf("import catalog: %w", err)
	}
	if _, err = conn.ExecContext(ctx, `
INSERT INTO tools SELECT * FROM import_tools
ON CONFLICT (server, tool) DO UPDATE SET description = excluded.description, annotations = excluded.annotations,
	input_schema = excluded.input_schema, category = excluded.category, severity = excluded.severity,
	risk_source = excluded.risk_source, why = excluded.why, last_seen = excluded.last_seen`); err != nil {
		return 0, fmt.Errorf("import catalog: %w", err)
	}
	if _, err = conn.ExecContext(ctx, `INSERT INTO catalog_imports VALUES (?, ?, ?, ?)`, server, at.UTC(), nullable(source), len(tools)); err != nil {
		return 0, fmt.Errorf("import catalog: %w", err)
	}
	if _, err = conn.ExecContext(ctx, "COMMIT"); err != nil {
		return 0, fmt.Errorf("import catalog: commit: %w", err)
	}
	return added, nil
}

// rawJSONValue is a JSON column value for the Appender (nil when empty).
func rawJSONValue(b json.RawMessage) driver.Value {
	if len(b) == 0 {
		return nil
	}
	return b
}

func rawJSON(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

// Tools returns the imported tools of server, sorted by name.
func (s *Store) Tools(ctx context.Context, server string) ([]ToolRecord, error) {
	rows, err := s.db.QueryContext(ctx, `
SELECT server, tool, coalesce(description, ''), coalesce(annotations::VARCHAR, ''), coalesce(input_schema::VARCHAR, ''),
       category, severity, risk_source, coalesce(why, ''), first_seen, last_seen
FROM tools WHERE server = ? ORDER BY tool`, server)
	if err != nil {
		return nil, fmt.Errorf("read tools of %s: %w", server, err)
	}
	defer rows.Close()
	var out []ToolRecord
	for rows.Next() {
		var t ToolRecord
		var ann, schema string
		if err := rows.Scan(&t.Server, &t.Tool, &t.Description, &ann, &schema, &t.Category, &t.Severity,
			&t.RiskSource, &t.Why, &t.FirstSeen, &t.LastSeen); err != nil {
			return nil, fmt.Errorf("read tools of %s: %w", server, err)
		}
		if ann != "" {
			t.Annotations = json.RawMessage(ann)
		}
		if schema != "" {
			t.InputSchema = json.RawMessage(schema)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// FirstCatalogImport returns when server's catalog was first imported.
func (s *Store) FirstCatalogImport(ctx context.Context, server string) (time.Time, bool, error) {
	var t sql.NullTime
	if err := s.db.QueryRowContext(ctx, `SELECT min(imported_at) FROM catalog_imports WHERE server = ?`, server).Scan(&t); err != nil {
		return time.Time{}, false, fmt.Errorf("read catalog imports of %s: %w", server, err)
	}
	return t.Time, t.Valid, nil
}

// PolicyRecord is one imported policy document.
type PolicyRecord struct {
	Server, Grant, Source string
	ImportedAt            time.Time
	Document              []byte // canonical JSON
}

// ImportPolicy records a policy document unless it equals the latest one
// recorded for the same server and grant; it reports whether it was new.
func (s *Store) ImportPolicy(ctx context.Context, rec PolicyRecord) (bool, error) {
	latest, err := s.LatestPolicy(ctx, rec.Server, rec.Grant)
	if err != nil {
		return false, err
	}
	if latest != nil && string(latest.Document) == string(rec.Document) {
		return false, nil
	}
	if _, err := s.db.ExecContext(ctx, `INSERT INTO policies VALUES (?, ?, ?, ?, ?)`,
		rec.Server, rec.Grant, rec.ImportedAt.UTC(), nullable(rec.Source), string(rec.Document)); err != nil {
		return false, fmt.Errorf("import policy for %s: %w", rec.Server, err)
	}
	return true, nil
}

// LatestPolicy returns the newest policy recorded for server and grant, or nil.
func (s *Store) LatestPolicy(ctx context.Context, server, grant string) (*PolicyRecord, error) {
	hist, err := s.PolicyHistory(ctx, server, grant)
	if err != nil || len(hist) == 0 {
		return nil, err
	}
	return &hist[len(hist)-1], nil
}

// PolicyHistory returns every policy recorded for server and grant, oldest first.
func (s *Store) PolicyHistory(ctx context.Context, server, grant string) ([]PolicyRecord, error) {
	rows, err := s.db.QueryContext(ctx, `
SELECT server, "grant", coalesce(source, ''), imported_at, document::VARCHAR
FROM policies WHERE server = ? AND "grant" = ? ORDER BY imported_at, rowid`, server, grant)
	if err != nil {
		return nil, fmt.Errorf("read policies of %s: %w", server, err)
	}
	out, err := scanPolicies(rows)
	if err != nil {
		return nil, fmt.Errorf("read policies of %s: %w", server, err)
	}
	return out, nil
}

// scanPolicies reads rows of (server, grant, source, imported_at, document).
func scanPolicies(rows *sql.Rows) ([]PolicyRecord, error) {
	defer rows.Close()
	var out []PolicyRecord
	for rows.Next() {
		var r PolicyRecord
		var doc string
		if err := rows.Scan(&r.Server, &r.Grant, &r.Source, &r.ImportedAt, &doc); err != nil {
			return nil, err
		}
		r.Document = []byte(doc)
		out = append(out, r)
	}
	return out, rows.Err()
}

// CurrentPolicies returns the newest policy recorded for each server and
// grant (of one server when server is not empty), by server and grant.
func (s *Store) CurrentPolicies(ctx context.Context, server string) ([]PolicyRecord, error) {
	rows, err := s.db.QueryContext(ctx, `
SELECT server, "grant", coalesce(source, ''), imported_at, document::VARCHAR
FROM policies WHERE ? = '' OR server = ?
QUALIFY row_number() OVER (PARTITION BY server, "grant" ORDER BY imported_at DESC, rowid DESC) = 1
ORDER BY server, "grant"`, server, server)
	if err != nil {
		return nil, fmt.Errorf("read current policies: %w", err)
	}
	out, err := scanPolicies(rows)
	if err != nil {
		return nil, fmt.Errorf("read current policies: %w", err)
	}
	return out, nil
}

// ForgetPolicies removes the policies recorded for server and grant (every
// grant of the server when allGrants) and says how many documents went: the
// recommender then compares with no current policy, or with the
// server-wide one, until another is recorded.
func (s *Store) ForgetPolicies(ctx context.Context, server, grant string, allGrants bool) (int, error) {
	r, err := s.db.ExecContext(ctx, `DELETE FROM policies WHERE server = ? AND (? OR "grant" = ?)`, server, allGrants, grant)
	if err != nil {
		return 0, fmt.Errorf("forget policies of %s: %w", server, err)
	}
	n, _ := r.RowsAffected()
	return int(n), nil
}

// Seen is what a server's history knows by name: its calls, its imported
// catalog and its recorded policies.
type Seen struct {
	Server     bool            // anything at all
	Grants     map[string]bool // grants of its calls
	Tools      map[string]bool // tools of its calls and its catalog
	Principals map[string]bool // agents and sessions of its calls
}

// NamesSeen reads what the server's whole history knows by name.
func (s *Store) NamesSeen(ctx context.Context, server string) (Seen, error) {
	seen := Seen{Grants: map[string]bool{}, Tools: map[string]bool{}, Principals: map[string]bool{}}
	rows, err := s.db.QueryContext(ctx, `
SELECT DISTINCT 'grant', "grant" FROM calls WHERE server = ? AND "grant" IS NOT NULL
UNION ALL SELECT DISTINCT 'tool', tool FROM calls WHERE server = ? AND tool IS NOT NULL
UNION ALL SELECT DISTINCT 'tool', tool FROM tools WHERE server = ?
UNION ALL SELECT DISTINCT 'principal', agent FROM calls WHERE server = ? AND agent IS NOT NULL
UNION ALL SELECT DISTINCT 'principal', session FROM calls WHERE server = ? AND session IS NOT NULL
UNION ALL SELECT DISTINCT 'server', server FROM policies WHERE server = ?`, server, server, server, server, server, server)
	if err != nil {
		return seen, fmt.Errorf("read the names of %s: %w", server, err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind, name string
		if err := rows.Scan(&kind, &name); err != nil {
			return seen, fmt.Errorf("read the names of %s: %w", server, err)
		}
		seen.Server = true
		switch kind {
		case "grant":
			seen.Grants[name] = true
		case "tool":
			seen.Tools[name] = true
		case "principal":
			seen.Principals[name] = true
		}
	}
	return seen, rows.Err()
}

// Suppression is an accepted or dismissed finding, until it expires.
type Suppression struct {
	FindingID string    `json:"finding_id"`
	Reason    string    `json:"reason"`
	Owner     string    `json:"by"`
	Until     time.Time `json:"until"`
	CreatedAt time.Time `json:"created_at"`
	// Covers, for a loosening, are the kinds of change it accepted
	// (recommend.WideningKinds): a later loosening of the same tool that
	// widens in another way is not suppressed. nil: the whole finding.
	Covers []string `json:"covers,omitempty"`
}

// SuppressionChange is one recorded change to a suppression.
type SuppressionChange struct {
	At        time.Time  `json:"at"`
	FindingID string     `json:"finding_id"`
	Action    string     `json:"action"` // suppress, update, unsuppress
	Reason    string     `json:"reason,omitempty"`
	Owner     string     `json:"by,omitempty"`
	Until     *time.Time `json:"until,omitempty"`
}

// Suppress creates or replaces a suppression and records the change.
func (s *Store) Suppress(ctx context.Context, sup Suppression) (action string, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("suppress: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM suppressions WHERE finding_id = ?`, sup.FindingID).Scan(&n); err != nil {
		return "", fmt.Errorf("suppress: %w", err)
	}
	action = "suppress"
	if n > 0 {
		action = "update"
	}
	if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO suppressions VALUES (?, ?, ?, ?, ?, ?)`,
		sup.FindingID, sup.Reason, nullable(sup.Owner), sup.Until.UTC(), sup.CreatedAt.UTC(), jsonList(sup.Covers)); err != nil {
		return "", fmt.Errorf("suppress: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO suppression_log VALUES (?, ?, ?, ?, ?, ?)`,
		sup.CreatedAt.UTC(), sup.FindingID, action, sup.Reason, nullable(sup.Owner), sup.Until.UTC()); err != nil {
		return "", fmt.Errorf("suppress: log: %w", err)
	}
	return action, tx.Commit()
}

// ErrNoSuppression means the finding is not suppressed.
var ErrNoSuppression = errors.New("no suppression for that finding")

// Unsuppress removes a suppression and records the change.
func (s *Store) Unsuppress(ctx context.Context, findingID, owner string, at time.Time) (err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("unsuppress: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	r, err := tx.ExecContext(ctx, `DELETE FROM suppressions WHERE finding_id = ?`, findingID)
	if err != nil {
		return fmt.Errorf("unsuppress: %w", err)
	}
	if n, _ := r.RowsAffected(); n == 0 {
		return fmt.Errorf("unsuppress %s: %w", findingID, ErrNoSuppression)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO suppression_log VALUES (?, ?, 'unsuppress', NULL, ?, NULL)`,
		at.UTC(), findingID, nullable(owner)); err != nil {
		return fmt.Errorf("unsuppress: log: %w", err)
	}
	return tx.Commit()
}

// Suppressions returns every suppression, expired ones included, by finding id.
func (s *Store) Suppressions(ctx context.Context) ([]Suppression, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT finding_id, reason, coalesce(owner, ''), until, created_at, covers FROM suppressions ORDER BY finding_id`)
	if err != nil {
		return nil, fmt.Errorf("read suppressions: %w", err)
	}
	defer rows.Close()
	var out []Suppression
	for rows.Next() {
		var sup Suppression
		var covers sql.NullString
		if err := rows.Scan(&sup.FindingID, &sup.Reason, &sup.Owner, &sup.Until, &sup.CreatedAt, &covers); err != nil {
			return nil, fmt.Errorf("read suppressions: %w", err)
		}
		if sup.Covers, err = parseJSONList(covers); err != nil {
			return nil, fmt.Errorf("read suppressions: %s: covers: %w", sup.FindingID, err)
		}
		out = append(out, sup)
	}
	return out, rows.Err()
}

// SuppressionLog returns the changes made at or after since, oldest first.
func (s *Store) SuppressionLog(ctx context.Context, server string, since time.Time) ([]SuppressionChange, error) {
	// A finding id is kind:server:grant:subject (recommend.FindingID): the
	// server's own changes only, as its report and recommendation list
	// them (another server's reasons and owners are not its readers').
	rows, err := s.db.QueryContext(ctx, `
SELECT changed_at, finding_id, action, coalesce(reason, ''), coalesce(owner, ''), until
FROM suppression_log WHERE changed_at >= ? AND starts_with(substr(finding_id, strpos(finding_id, ':') + 1), ? || ':')
ORDER BY changed_at, rowid`, since.UTC(), server)
	if err != nil {
		return nil, fmt.Errorf("read suppression log: %w", err)
	}
	defer rows.Close()
	var out []SuppressionChange
	for rows.Next() {
		var c SuppressionChange
		var until sql.NullTime
		if err := rows.Scan(&c.At, &c.FindingID, &c.Action, &c.Reason, &c.Owner, &until); err != nil {
			return nil, fmt.Errorf("read suppression log: %w", err)
		}
		if until.Valid {
			u := until.Time.UTC()
			c.Until = &u
		}
		c.At = c.At.UTC()
		out = append(out, c)
	}
	return out, rows.Err()
}
