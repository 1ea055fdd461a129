package ingest

import (
	"maps"
	"slices"
	"strings"
	"sync"
)

// Health tracks what keeps ingestion from working, by kind (such as
// "missing" or "commit"); the zero value is healthy.
type Health struct {
	mu       sync.Mutex
	problems map[string]string
}

// Set records the problem of one kind; reason "" clears it. When that
// changes the state, report (when not nil) gets the new State.
func (h *Health) Set(kind, reason string, report func(ok bool, reason string)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.problems[kind] == reason {
		return
	}
	if reason == "" {
		delete(h.problems, kind)
	} else {
		if h.problems == nil {
			h.problems = map[string]string{}
		}
		h.problems[kind] = reason
	}
	if report != nil {
		report(h.state())
	}
}

// State is true when nothing is wrong, else false and the reasons.
func (h *Health) State() (ok bool, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state()
}

func (h *Health) state() (bool, string) {
	reasons := make([]string, 0, len(h.problems))
	for _, k := range slices.Sorted(maps.Keys(h.problems)) {
		reasons = append(reasons, h.problems[k])
	}
	return len(reasons) == 0, strings.Join(reasons, "; ")
}
