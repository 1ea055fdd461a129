-- name: denied_calls
-- description: The most recent calls the gateway refused (denied, hidden, rate-limited or held for approval), newest first.
-- param: server string = "" : only this MCP server (empty: every server)
-- param: since duration = 30d : how far back from now
-- param: limit int = 50 : rows to show
SELECT ts, server, tool, decision, agent, session, rule, reason
FROM calls
WHERE decision <> 'allowed'
  AND ts >= $now - to_seconds($since) AND ts <= $now
  AND ($server = '' OR server = $server)
ORDER BY ts DESC, id
LIMIT $limit;
