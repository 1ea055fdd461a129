package policy

import (
	"testing"
	"time"
)

// FuzzParse checks that no input makes the package panic and that whatever
// Parse accepts has a stable canonical form that parses back to itself.
// Seeds: testdata/fuzz/FuzzParse plus the examples below.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"spec.json", "stripe.json", "approval.json", "permissive.json", "lenient.json", "intercept.json"} {
		f.Add(readTestdata(f, name))
	}
	f.Add([]byte(`{"version":"1","default":"deny","tools":{"x":{},"x":{}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if p, err := Decode(data, "fuzz.json"); err == nil {
			_ = p.Validate()
			if _, err := p.Canonical(); err != nil {
				t.Fatalf("Canonical of a decoded policy failed: %v", err)
			}
		}
		p, err := Parse(data, "fuzz.json")
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		c1, err := p.Canonical()
		if err != nil {
			t.Fatalf("Canonical: %v", err)
		}
		q, err := Parse(c1, "canonical.json")
		if err != nil {
			t.Fatalf("canonical form does not parse: %v\n%s", err, c1)
		}
		c2, err := q.Canonical()
		if err != nil {
			t.Fatalf("Canonical of canonical: %v", err)
		}
		if string(c1) != string(c2) {
			t.Fatalf("canonical form is not stable:\n%s\n---\n%s", c1, c2)
		}
		if _, err := Intercept(p, InterceptOptions{}); err != nil {
			t.Fatalf("Intercept: %v", err)
		}
		if _, err := Patch(nil, p); err != nil {
			t.Fatalf("Patch: %v", err)
		}
		_ = UnifiedDiff(nil, p, "a", "b")
		e := NewEvaluator(p)
		ts := time.Date(2026, 3, 5, 10, 0, 0, 0, time.UTC)
		for _, tool := range append(p.ToolNames(), "unlisted") {
			e.Evaluate(Call{TS: ts, Tool: tool})
			e.Evaluate(Call{TS: ts, Tool: tool, Session: "s", Args: map[string]any{"amount": 1.0, "reason": "x"}})
		}
	})
}
