-- name: hourly_volume
-- description: Calls per UTC hour with refusals and upstream errors, oldest first.
-- param: server string = "" : only this MCP server (empty: every server)
-- param: since duration = 2d : how far back from now
SELECT to_timestamp((epoch_ms(ts) // 3600000) * 3600) AS hour,
       count(*) AS calls,
       count(*) FILTER (decision <> 'allowed') AS refused,
       count(*) FILTER (status = 'error') AS errors,
       count(DISTINCT session) AS sessions
FROM calls
WHERE ts >= $now - to_seconds($since) AND ts <= $now
  AND ($server = '' OR server = $server)
GROUP BY hour
ORDER BY hour;
