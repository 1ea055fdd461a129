-- name: dead_letters
-- description: Rejected input by reason and source, with the latest example's location.
-- param: limit int = 50 : rows to show
SELECT reason, source,
       count(*) AS rejected,
       max(rejected_at) AS last_rejected,
       arg_max(coalesce('line ' || line::VARCHAR, 'seq ' || seq::VARCHAR, ''), rejected_at) AS last_at,
       arg_max(detail, rejected_at) AS last_detail
FROM dead_letters
GROUP BY reason, source
ORDER BY rejected DESC, reason, source
LIMIT $limit;
