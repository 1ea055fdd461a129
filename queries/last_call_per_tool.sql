-- name: last_call_per_tool
-- description: For every tool ever called, when it was last called and last allowed, over the whole history.
-- param: server string = "" : only this MCP server (empty: every server)
SELECT server, tool,
       max(ts) AS last_call,
       max(ts) FILTER (decision = 'allowed') AS last_allowed,
       count(*) AS calls
FROM calls
WHERE ts <= $now
  AND ($server = '' OR server = $server)
GROUP BY server, tool
ORDER BY last_call DESC, server, tool;
