package catalog

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// FuzzParse: Parse never panics, fails only with a *ParseError naming the
// file, and what it accepts has unique non-empty names, classifies without
// panicking, and survives a JSON round trip. Seeds live in
// testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"server":"s","tools":[{"name":"get_x","annotations":{"readOnlyHint":true}}]}`))
	f.Add([]byte(`{"result":{"tools":[{"name":"http","inputSchema":{"properties":{"method":{"enum":["DELETE"]}}}}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "fuzz.json")
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || !strings.HasPrefix(err.Error(), "fuzz.json: ") {
				t.Fatalf("error is not a ParseError naming the file: %v", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, tool := range c.Tools {
			if strings.TrimSpace(tool.Name) == "" || seen[tool.Name] {
				t.Fatalf("empty or duplicate name %q", tool.Name)
			}
			seen[tool.Name] = true
			cl := Classify(tool, nil)
			if !cl.Category.Valid() || cl.Severity.Rank() < 0 || cl.Source == "" || cl.Why == "" {
				t.Fatalf("bad classification %+v", cl)
			}
		}
		out, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		again, err := Parse(out, "again.json")
		if err != nil {
			t.Fatalf("round trip does not parse: %v\n%s", err, out)
		}
		if again.Server != c.Server || len(again.Tools) != len(c.Tools) {
			t.Fatalf("round trip changed the catalog")
		}
		for i := range c.Tools {
			a, b := c.Tools[i], again.Tools[i]
			if a.Name != b.Name || a.Description != b.Description || Classify(a, nil) != Classify(b, nil) {
				t.Fatalf("round trip changed tool %d: %+v vs %+v", i, a, b)
			}
		}
	})
}

// FuzzLoadOverrides: LoadOverrides never panics and accepts only valid
// categories.
func FuzzLoadOverrides(f *testing.F) {
	f.Add([]byte(`{"a":"read","b":{"category":"exec","why":"x"}}`))
	f.Add([]byte("a: write\nb:\n  category: admin\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		o, err := LoadOverrides(data, "fuzz")
		if err != nil {
			return
		}
		for tool, v := range o {
			if !v.Category.Valid() || strings.TrimSpace(tool) == "" {
				t.Fatalf("accepted %q: %+v", tool, v)
			}
		}
	})
}
