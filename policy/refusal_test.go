package policy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A call whose arguments were not stored, refused at the gateway by a
// conditional rule, is refused again by a policy that keeps the rule's
// conditions, however they are spelled and wherever the rule now sits, and
// is let through by one that changed them.
func TestRefusedCallsKeepTheirConditions(t *testing.T) {
	current := mustParse(t, `{"version":"1","default":"deny","tools":{"refund":{
		"require":[{"path":"args.reason","op":"exists","value":true}],
		"deny_if":[{"conditions":[{"path":"args.amount","op":"gte","value":500},{"path":"args.tier","op":"eq","value":"trial"}],"on_deny":"no"}]}}}`)
	refusals := Refusals(current)
	require.Len(t, refusals, 2)
	denied := refusals["/tools/refund/deny_if/0"]
	failed := refusals["/tools/refund/require/0"]
	require.NotNil(t, denied)
	require.NotNil(t, failed)

	tests := []struct {
		name     string
		proposed string
		refused  *Refusal
		want     Verdict
	}{
		{"same rule", `{"version":"1","default":"deny","tools":{"refund":{
			"deny_if":[{"conditions":[{"path":"args.amount","op":"gte","value":500},{"path":"args.tier","op":"eq","value":"trial"}],"on_deny":"no"}]}}}`,
			denied, Verdict{Denied, "/tools/refund/deny_if/0", "no"}},
		{"same conditions respelled, in another order, after an approval", `{"version":"1","default":"deny","tools":{"refund":{
			"deny_if":[{"conditions":[{"path":"args.x","op":"eq","value":1}]},
			           {"conditions":[{"path":"args.tier","op":"eq","value": "trial"},{"path":"args.amount","op":"gte","value":5e2}]}]}}}`,
			denied, Verdict{Denied, "/tools/refund/deny_if/1", "denied by /tools/refund/deny_if/1"}},
		{"a condition dropped", `{"version":"1","default":"deny","tools":{"refund":{
			"deny_if":[{"conditions":[{"path":"args.amount","op":"gte","value":500}]}]}}}`,
			denied, Verdict{Decision: Allowed}},
		{"a threshold changed", `{"version":"1","default":"deny","tools":{"refund":{
			"deny_if":[{"conditions":[{"path":"args.amount","op":"gte","value":5000},{"path":"args.tier","op":"eq","value":"trial"}]}]}}}`,
			denied, Verdict{Decision: Allowed}},
		{"require kept", `{"version":"1","default":"deny","tools":{"refund":{
			"require":[{"path":"args.reason","op":"exists","value":true}]}}}`,
			failed, Verdict{Denied, "/tools/refund/require/0", "required condition not met: args.reason exists true"}},
		{"require moved to all_tools", `{"version":"1","default":"deny","tools":{"refund":{}},
			"all_tools":{"require":[{"path":"args.reason","op":"exists","value":true}]}}`,
			failed, Verdict{Denied, "/all_tools/require/0", "required condition not met: args.reason exists true"}},
		{"require dropped", `{"version":"1","default":"deny","tools":{"refund":{}}}`, failed, Verdict{Decision: Allowed}},
		{"an approval comes first", `{"version":"1","default":"deny","tools":{"refund":{"deny_if":[{"on_deny":"ask"},
			{"conditions":[{"path":"args.amount","op":"gte","value":500},{"path":"args.tier","op":"eq","value":"trial"}]}]}}}`,
			denied, Verdict{ApprovalRequired, "/tools/refund/deny_if/0", "ask"}},
		{"no refusal known", `{"version":"1","default":"deny","tools":{"refund":{
			"deny_if":[{"conditions":[{"path":"args.amount","op":"gte","value":500},{"path":"args.tier","op":"eq","value":"trial"}]}]}}}`,
			nil, Verdict{Decision: Allowed}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := NewEvaluator(mustParse(t, tt.proposed))
			assert.Equal(t, tt.want, e.Evaluate(Call{TS: t0, Tool: "refund", Refused: tt.refused}))
		})
	}

	// Known arguments decide by themselves: a refusal does not override them.
	e := NewEvaluator(current)
	v := e.Evaluate(Call{TS: t0, Tool: "refund", Args: map[string]any{"reason": "dup", "amount": 10.0}, Refused: denied})
	assert.Equal(t, Allowed, v.Decision)
	assert.Nil(t, Refusals(nil))
}

// Two spellings of one value name one condition; two values the evaluator
// tells apart (an integer, compared as text by its digits, and the same
// number written as a float, compared as text as 1e+06) never do: else
// respelling a deny_if's value would let calls through unreported.
func TestConditionKeyFollowsTheEvaluator(t *testing.T) {
	key := func(v string) string { return ConditionKey(Condition{Path: "args.amount", Op: "eq", Value: []byte(v)}) }
	assert.Equal(t, key(`1e6`), key(`1.0e6`))
	assert.Equal(t, key(`1e6`), key(`1000000.0`))
	assert.Equal(t, key(`{"a": 1, "b": [2]}`), key(`{"b":[2.0],"a":1.0}`), "inside an object every number is a float")
	assert.NotEqual(t, key(`1000000`), key(`1e6`))
	assert.NotEqual(t, key(`1000000`), key(`1000000.0`))
	call := Call{TS: time.Unix(0, 0), Tool: "pay", Grant: "g", Args: map[string]any{"amount": "1000000"}}
	for _, v := range []string{`1000000`, `1e6`} {
		p, err := Parse([]byte(`{"version":"1","default":"deny","tools":{"pay":{"deny_if":[{"conditions":[{"path":"args.amount","op":"eq","value":`+v+`}],"on_deny":"no"}]}}}`), "p.json")
		require.NoError(t, err)
		want := Allowed
		if v == `1000000` {
			want = Denied
		}
		assert.Equal(t, want, NewEvaluator(p).Evaluate(call).Decision, "value %s", v)
	}
}

// For lt…gte, which compare numbers alone, 500 and 5e2 are one value.
func TestConditionKeyOfAThreshold(t *testing.T) {
	key := func(v string) string {
		return ConditionKey(Condition{Path: "args.amount", Op: "gte", Value: []byte(v)})
	}
	assert.Equal(t, key(`500`), key(`5e2`))
}
