-- name: decisions_by_server
-- description: How each server's gateways decided: calls per decision and their share.
-- param: since duration = 30d : how far back from now
SELECT server, decision,
       count(*) AS calls,
       round(100.0 * count(*) / sum(count(*)) OVER (PARTITION BY server), 2) AS pct
FROM calls
WHERE ts >= $now - to_seconds($since) AND ts <= $now
GROUP BY server, decision
ORDER BY server, calls DESC, decision;
