package report

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/mcptrail/mcptrail/config"
	"github.com/mcptrail/mcptrail/internal/duration"
)

// Schedule is one entry of the `reports:` section of config.yaml.
type Schedule struct {
	Name string
	// Spec is the cron expression as written, with its optional time zone
	// ("CRON_TZ=Europe/Berlin 0 8 * * MON"); Cron is its parsed form.
	Spec string
	Cron cron.Schedule
	// Servers to report on; empty means every server with calls in the
	// window.
	Servers []string
	Window  time.Duration
	Formats []string
	OutDir  string
	// Subject is the NATS subject the JSON report is published to;
	// "{server}" in it is replaced by the server's name.
	Subject string
	// Keep is how many reports to keep per server (0 keeps all).
	Keep int
}

// Defaults of a schedule's optional keys.
const (
	DefaultWindow  = 7 * 24 * time.Hour
	DefaultSubject = "mcptrail.reports.{server}"
	DefaultKeep    = 10
)

// scheduleKeys are the keys a schedule may have, with what they take.
var scheduleKeys = map[string]string{
	"name":     "a name for the report, unique among the schedules",
	"schedule": `a cron expression: minute hour day-of-month month day-of-week, optionally after CRON_TZ=Area/City (e.g. "CRON_TZ=Europe/Berlin 0 8 * * MON"), or @daily, @weekly, @every 12h`,
	"servers":  `a list of MCP server names, or "all" (the default)`,
	"window":   "a positive duration such as 24h, 7d or 2w (default 7d)",
	"formats":  "a list of markdown, json and html (default all three; report.json is always written)",
	"out_dir":  "the folder the reports are written to (default ./mcptrail-reports/<name>)",
	"subject":  `a NATS subject to publish the JSON report to; {server} becomes the server's name (default "mcptrail.reports.{server}")`,
	"keep":     "how many reports to keep per server, a whole number; 0 keeps all (default 10)",
}

// ParseSchedules validates the `reports:` section. Every problem is reported,
// each naming the report, the key, the value and what is allowed; the
// error is a *config.Error (exit code 2).
func ParseSchedules(raw []map[string]any) ([]Schedule, error) {
	var errs []string
	fail := func(i int, name, key string, val any, allowed string) {
		who := fmt.Sprintf("reports[%d]", i)
		if name != "" {
			who += fmt.Sprintf(" (%s)", name)
		}
		errs = append(errs, fmt.Sprintf("config: %s.%s = %s: %s", who, key, quote(val), allowed))
	}
	var out []Schedule
	names := map[string]int{}
	dirs := map[string]string{}
	for i, m := range raw {
		entry := map[string]any{}
		for k, v := range m {
			entry[strings.ToLower(k)] = v
		}
		name := ""
		if v, ok := entry["name"]; ok {
			name = strings.TrimSpace(str(v))
		}
		var unknown []string
		for k := range entry {
			if _, ok := scheduleKeys[k]; !ok {
				unknown = append(unknown, k)
			}
		}
		sort.Strings(unknown)
		for _, k := range unknown {
			keys := make([]string, 0, len(scheduleKeys))
			for k := range scheduleKeys {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			fail(i, name, k, entry[k], "unknown key: a report takes "+strings.Join(keys, ", "))
		}
		s := Schedule{Name: name, Window: DefaultWindow, Formats: append([]string(nil), Formats...), Subject: DefaultSubject, Keep: DefaultKeep}
		switch {
		case name == "":
			fail(i, "", "name", entry["name"], scheduleKeys["name"])
		case names[name] > 0:
			fail(i, name, "name", name, fmt.Sprintf("already used by reports[%d]: %s", names[name]-1, scheduleKeys["name"]))
		default:
			names[name] = i + 1
		}

		if v, ok := entry["schedule"]; !ok || strings.TrimSpace(str(v)) == "" {
			fail(i, name, "schedule", entry["schedule"], "required: "+scheduleKeys["schedule"])
		} else {
			s.Spec = strings.Join(strings.Fields(str(v)), " ")
			c, err := cron.ParseStandard(s.Spec)
			switch {
			case err != nil:
				fail(i, name, "schedule", v, fmt.Sprintf("%v; want %s", err, scheduleKeys["schedule"]))
			case c.Next(time.Now()).IsZero():
				fail(i, name, "schedule", v, "never fires (no such date in the next five years): "+scheduleKeys["schedule"])
			}
			s.Cron = c
		}

		if v, ok := entry["servers"]; ok && v != nil {
			list, ok := stringList(v)
			if !ok {
				fail(i, name, "servers", v, scheduleKeys["servers"])
			}
			if !(len(list) == 1 && (strings.EqualFold(list[0], "all") || list[0] == "*")) {
				for _, srv := range list {
					if strings.TrimSpace(srv) == "" {
						fail(i, name, "servers", v, "a server name is empty: "+scheduleKeys["servers"])
						break
					}
				}
				s.Servers = list
			}
		}

		if v, ok := entry["window"]; ok && v != nil {
			d, err := duration.Parse(str(v))
			if err != nil || d <= 0 {
				fail(i, name, "window", v, scheduleKeys["window"])
			}
			s.Window = d
		}

		if v, ok := entry["formats"]; ok && v != nil {
			list, ok := stringList(v)
			if !ok {
				fail(i, name, "formats", v, scheduleKeys["formats"])
			} else if len(list) == 0 {
				fail(i, name, "formats", v, "empty: "+scheduleKeys["formats"])
			} else if f, err := ParseFormats(list...); err != nil {
				fail(i, name, "formats", v, fmt.Sprintf("%v (a list of markdown, json and html)", err))
			} else {
				s.Formats = f
			}
		}

		s.OutDir = filepath.Join(".", "mcptrail-reports", fileSafe(name))
		if v, ok := entry["out_dir"]; ok && v != nil {
			if strings.TrimSpace(str(v)) == "" {
				fail(i, name, "out_dir", v, scheduleKeys["out_dir"])
			}
			s.OutDir = filepath.Clean(str(v))
		}
		abs, err := filepath.Abs(s.OutDir)
		if err != nil {
			abs = s.OutDir
		}
		if other, ok := dirs[abs]; ok {
			fail(i, name, "out_dir", s.OutDir, fmt.Sprintf("already the folder of report %s: give each report its own folder (a report compares with the previous one in its folder, and keeps the number of reports there)", other))
		} else {
			dirs[abs] = name
		}

		if v, ok := entry["subject"]; ok && v != nil {
			s.Subject = strings.TrimSpace(str(v))
			if msg := checkSubject(s.Subject); msg != "" {
				fail(i, name, "subject", v, msg+": "+scheduleKeys["subject"])
			}
		}

		if v, ok := entry["keep"]; ok && v != nil {
			n, ok := whole(v)
			if !ok || n < 0 {
				fail(i, name, "keep", v, scheduleKeys["keep"])
			}
			s.Keep = n
		}
		out = append(out, s)
	}
	if len(errs) > 0 {
		return nil, &config.Error{Msg: strings.Join(errs, "\n")}
	}
	return out, nil
}

func quote(v any) string {
	switch x := v.(type) {
	case nil:
		return "(missing)"
	case string:
		return strconv.Quote(x)
	case []any, []string:
		return fmt.Sprintf("%v", x)
	}
	return fmt.Sprint(v)
}

func str(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

// stringList reads a YAML list of strings, or a comma-separated string.
func stringList(v any) ([]string, bool) {
	switch x := v.(type) {
	case string:
		var out []string
		for _, s := range strings.Split(x, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out, true
	case []string:
		return x, true
	case []any:
		out := make([]string, 0, len(x))
		for _, item := range x {
			s, ok := item.(string)
			if !ok {
				return nil, false
			}
			out = append(out, strings.TrimSpace(s))
		}
		return out, true
	}
	return nil, false
}

func whole(v any) (int, bool) {
	switch x := v.(type) {
	case int:
		return x, true
	case int64:
		return int(x), true
	case uint64:
		return int(x), true
	case float64:
		if x == float64(int(x)) {
			return int(x), true
		}
	case string:
		n, err := strconv.Atoi(strings.TrimSpace(x))
		return n, err == nil
	}
	return 0, false
}

// checkSubject accepts a NATS subject to publish to: dot-separated
// non-empty tokens, no whitespace, no wildcard.
func checkSubject(s string) string {
	if s == "" {
		return "empty"
	}
	if strings.ContainsAny(s, " \t\r\n") {
		return "a subject has no spaces"
	}
	for _, tok := range strings.Split(s, ".") {
		switch tok {
		case "":
			return "a subject is made of non-empty tokens separated by dots"
		case "*", ">":
			return "a wildcard cannot be published to"
		}
	}
	return ""
}

// SubjectFor is the subject a schedule publishes a server's report to.
func (s Schedule) SubjectFor(server string) string {
	subject := s.Subject
	if subject == "" {
		subject = DefaultSubject
	}
	return strings.ReplaceAll(subject, "{server}", subjectToken(server))
}

// subjectToken makes a server name one subject token.
func subjectToken(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '.', '*', '>', ' ', '\t', '\r', '\n':
			b.WriteByte('_')
		default:
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "_"
	}
	return b.String()
}
