package mcpclient

import (
	"errors"
	"strings"
)

// SplitCommand splits a --command line into its arguments as a POSIX shell
// would, without running a shell: words are separated by blanks; single
// quotes keep everything, double quotes keep everything but \" and \\, and
// a backslash outside quotes keeps the next character. No variables, globs
// or pipes.
func SplitCommand(line string) ([]string, error) {
	var (
		args   []string
		word   strings.Builder
		inWord bool
		quote  byte // 0, '\'' or '"'
		escape bool
	)
	// Bytes, not runes: the separators are ASCII, and an argument that is
	// not UTF-8 passes unchanged.
	for i := 0; i < len(line); i++ {
		r := line[i]
		switch {
		case escape:
			if quote == '"' && r != '"' && r != '\\' {
				word.WriteByte('\\')
			}
			word.WriteByte(r)
			escape = false
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				word.WriteByte(r)
			}
		case r == '\\':
			escape, inWord = true, true
		case quote == '"':
			if r == '"' {
				quote = 0
			} else {
				word.WriteByte(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				args = append(args, word.String())
				word.Reset()
				inWord = false
			}
		default:
			word.WriteByte(r)
			inWord = true
		}
	}
	if quote != 0 || escape {
		return nil, errors.New("--command has an unclosed quote or a trailing backslash")
	}
	if inWord {
		args = append(args, word.String())
	}
	if len(args) == 0 {
		return nil, errors.New("--command is empty: give the server's command line, e.g. --command \"npx -y @scope/server\"")
	}
	return args, nil
}
