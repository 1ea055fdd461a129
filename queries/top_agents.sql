-- name: top_agents
-- description: The agents that call the most, with how many tools and sessions they use and how often they are refused.
-- param: server string = "" : only this MCP server (empty: every server)
-- param: since duration = 30d : how far back from now
-- param: limit int = 20 : rows to show
SELECT coalesce(agent, '(unknown)') AS agent,
       count(*) AS calls,
       count(DISTINCT tool) AS tools,
       count(DISTINCT session) AS sessions,
       count(*) FILTER (decision <> 'allowed') AS refused,
       min(ts) AS first_call,
       max(ts) AS last_call
FROM calls
WHERE ts >= $now - to_seconds($since) AND ts <= $now
  AND ($server = '' OR server = $server)
GROUP BY ALL
ORDER BY calls DESC, agent
LIMIT $limit;
