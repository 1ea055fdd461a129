package policy

import (
	"fmt"
	"strings"
)

// Problem is one thing wrong with a policy document, located by the JSON
// pointer of the offending value ("" for the whole document).
type Problem struct {
	Path    string
	Message string
}

func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// Error lists every problem found in one policy document. Error() prints one
// problem per line, each prefixed with the file name when File is set, e.g.
// `policy.json: /tools/delete_vm/limits/0/window: unknown window "week" (allowed: minute, hour, day)`.
type Error struct {
	File     string
	Problems []Problem
}

func (e *Error) Error() string {
	if len(e.Problems) == 0 {
		return e.prefix() + "invalid policy"
	}
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = e.prefix() + p.String()
	}
	return strings.Join(lines, "\n")
}

func (e *Error) prefix() string {
	if e.File == "" {
		return ""
	}
	return e.File + ": "
}

// problems collects Problems while a document is walked.
type problems []Problem

func (ps *problems) add(path, format string, args ...any) {
	*ps = append(*ps, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// err returns nil when nothing was found; never a typed nil.
func (ps problems) err(file string) error {
	if len(ps) == 0 {
		return nil
	}
	return &Error{File: file, Problems: ps}
}
