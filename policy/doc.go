// Package policy is the PolicyLayer policy.json model of mcptrail: lenient
// parsing that keeps unknown fields, validation that reports every problem with
// its JSON pointer, a stable canonical form (so that diffs stay minimal), RFC 6902
// JSON Patch and unified diffs between policies, translation to Intercept YAML,
// and the one Evaluator that both `mcptrail replay` and the recommender's replay
// use to decide what a policy would have done to past calls.
//
// The package is a leaf: it imports no other mcptrail package.
package policy
