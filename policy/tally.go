package policy

// Counts are calls per decision.
type Counts struct {
	Calls            int `json:"calls"`
	Allowed          int `json:"allowed"`
	Denied           int `json:"denied"`
	Hidden           int `json:"hidden"`
	RateLimited      int `json:"rate_limited"`
	ApprovalRequired int `json:"approval_required"`
}

func (c *Counts) add(decision string) {
	c.Calls++
	switch decision {
	case Allowed:
		c.Allowed++
	case Denied:
		c.Denied++
	case Hidden:
		c.Hidden++
	case RateLimited:
		c.RateLimited++
	case ApprovalRequired:
		c.ApprovalRequired++
	}
}

// Tally summarises the verdicts of a replay: totals, per tool, and the number
// of distinct sessions that had at least one call not allowed. Calls without a
// session are not counted as sessions; a caller that stands a gateway instance
// in for the session (SPEC §5) sets Call.Session accordingly. The zero value is
// ready to use.
type Tally struct {
	Counts
	SessionsAffected int                `json:"sessions_affected"`
	ByTool           map[string]*Counts `json:"by_tool"`
	affected         map[string]struct{}
}

// Add records the verdict of one call.
func (t *Tally) Add(c Call, v Verdict) {
	t.Counts.add(v.Decision)
	if t.ByTool == nil {
		t.ByTool = map[string]*Counts{}
	}
	tc := t.ByTool[c.Tool]
	if tc == nil {
		tc = &Counts{}
		t.ByTool[c.Tool] = tc
	}
	tc.add(v.Decision)
	if v.Decision != Allowed && c.Session != "" {
		if t.affected == nil {
			t.affected = map[string]struct{}{}
		}
		if _, ok := t.affected[c.Session]; !ok {
			t.affected[c.Session] = struct{}{}
			t.SessionsAffected++
		}
	}
}
