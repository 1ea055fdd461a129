-- name: top_sessions
-- description: Sessions with the most calls (gateway instance where events carry no session), with their span and tool variety.
-- param: server string = "" : only this MCP server (empty: every server)
-- param: since duration = 30d : how far back from now
-- param: limit int = 20 : rows to show
SELECT coalesce(session, 'gateway:' || gateway, '(none)') AS session,
       any_value(agent) AS agent,
       count(*) AS calls,
       count(DISTINCT tool) AS tools,
       count(*) FILTER (decision <> 'allowed') AS refused,
       min(ts) AS first_call,
       max(ts) AS last_call,
       round((epoch_ms(max(ts)) - epoch_ms(min(ts))) / 1000.0, 0) AS span_s
FROM calls
WHERE ts >= $now - to_seconds($since) AND ts <= $now
  AND ($server = '' OR server = $server)
GROUP BY 1
ORDER BY calls DESC, session
LIMIT $limit;
