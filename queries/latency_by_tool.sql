-- name: latency_by_tool
-- description: Upstream latency percentiles (milliseconds) of forwarded calls per tool, slowest p95 first.
-- param: server string = "" : only this MCP server (empty: every server)
-- param: since duration = 30d : how far back from now
SELECT server, tool,
       count(latency_ms) AS calls,
       round(quantile_cont(latency_ms, 0.50), 1) AS p50_ms,
       round(quantile_cont(latency_ms, 0.95), 1) AS p95_ms,
       round(quantile_cont(latency_ms, 0.99), 1) AS p99_ms,
       round(max(latency_ms), 1) AS max_ms
FROM calls
WHERE latency_ms IS NOT NULL
  AND ts >= $now - to_seconds($since) AND ts <= $now
  AND ($server = '' OR server = $server)
GROUP BY server, tool
ORDER BY p95_ms DESC, server, tool;
