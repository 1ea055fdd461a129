-- name: calls_by_tool
-- description: Calls per tool in the window, split by decision and upstream errors, busiest first.
-- param: server string = "" : only this MCP server (empty: every server)
-- param: since duration = 30d : how far back from now
SELECT server, tool,
       count(*) AS calls,
       count(*) FILTER (decision = 'allowed') AS allowed,
       count(*) FILTER (decision <> 'allowed') AS refused,
       count(*) FILTER (status = 'error') AS errors,
       count(DISTINCT session) AS sessions,
       max(ts) AS last_call
FROM calls
WHERE ts >= $now - to_seconds($since) AND ts <= $now
  AND ($server = '' OR server = $server)
GROUP BY server, tool
ORDER BY calls DESC, server, tool;
