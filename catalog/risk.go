package catalog

import (
	"fmt"
	"strings"
)

// Category is what a tool can do to the system behind its MCP server.
type Category string

// The five categories, from least to most risky. The order is total so that
// "the riskiest signal wins" is always defined:
//
//	read < write < destructive < exec < admin
//
// A write changes state that can be changed back. A destructive call loses data
// or availability inside its own target (a deleted VM, a powered-off guest). An
// exec call runs arbitrary code or commands, so it can do whatever the target
// can, destruction included. An admin call changes who may do what (users,
// roles, credentials, firewalls, cluster membership), so one misuse can open
// every other tool to an attacker: it ranks highest.
const (
	Read        Category = "read"
	Write       Category = "write"
	Destructive Category = "destructive"
	Exec        Category = "exec"
	Admin       Category = "admin"
)

// Categories returns every category, least risky first.
func Categories() []Category { return []Category{Read, Write, Destructive, Exec, Admin} }

// Rank is the position of c in the risk order (read = 0 … admin = 4), or -1
// for a value that is not a category.
func (c Category) Rank() int {
	switch c {
	case Read:
		return 0
	case Write:
		return 1
	case Destructive:
		return 2
	case Exec:
		return 3
	case Admin:
		return 4
	}
	return -1
}

// Valid reports whether c is one of the five categories.
func (c Category) Valid() bool { return c.Rank() >= 0 }

// Riskier reports whether c ranks strictly above d.
func (c Category) Riskier(d Category) bool { return c.Rank() > d.Rank() }

// Severity is the severity a finding about a tool of this category starts at.
func (c Category) Severity() Severity {
	switch c {
	case Read:
		return SeverityInfo
	case Write:
		return SeverityLow
	case Destructive, Exec:
		return SeverityHigh
	case Admin:
		return SeverityCritical
	}
	// An unknown category is treated like the unknown-tool default (write).
	return SeverityLow
}

// ParseCategory accepts a category name in any case, with surrounding space.
func ParseCategory(s string) (Category, error) {
	c := Category(strings.ToLower(strings.TrimSpace(s)))
	if !c.Valid() {
		return "", fmt.Errorf("unknown category %q (allowed: %s)", s, joinCategories())
	}
	return c, nil
}

func joinCategories() string {
	cs := Categories()
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = string(c)
	}
	return strings.Join(names, ", ")
}

// Severity is the SPEC's finding severity scale.
type Severity string

// Severities, least severe first. Categories map onto them as
//
//	read → info, write → low, destructive → high, exec → high, admin → critical
//
// medium is not produced by classification; detectors use it for findings
// (rate limits, polling) that sit between a harmless read and a risky tool.
const (
	SeverityInfo     Severity = "info"
	SeverityLow      Severity = "low"
	SeverityMedium   Severity = "medium"
	SeverityHigh     Severity = "high"
	SeverityCritical Severity = "critical"
)

// Severities returns every severity, least severe first.
func Severities() []Severity {
	return []Severity{SeverityInfo, SeverityLow, SeverityMedium, SeverityHigh, SeverityCritical}
}

// Rank is the position of s on the scale (info = 0 … critical = 4), or -1 for
// a value that is not a severity; `--fail-on` compares ranks.
func (s Severity) Rank() int {
	for i, v := range Severities() {
		if s == v {
			return i
		}
	}
	return -1
}

// ParseSeverity accepts a severity name in any case, with surrounding space.
func ParseSeverity(s string) (Severity, error) {
	v := Severity(strings.ToLower(strings.TrimSpace(s)))
	if v.Rank() < 0 {
		return "", fmt.Errorf("unknown severity %q (allowed: info, low, medium, high, critical)", s)
	}
	return v, nil
}

// Source names the signal that decided a tool's category.
type Source string

// Sources, in the order Classify consults them.
const (
	SourceOverride    Source = "override"    // the user's override file
	SourceAnnotation  Source = "annotation"  // the server's MCP annotations
	SourceName        Source = "name"        // verbs and nouns of the tool name
	SourceDescription Source = "description" // the tool's description
	SourceSchema      Source = "schema"      // the input schema (argument enums, device arguments)
	SourceDefault     Source = "default"     // no signal at all
)

// Sources returns every source in the order Classify consults them.
func Sources() []Source {
	return []Source{SourceOverride, SourceAnnotation, SourceName, SourceDescription, SourceSchema, SourceDefault}
}
