package analytics

import "database/sql"

// namedArg builds a named parameter for Query ($name in SQL).
func namedArg(name string, value any) any { return sql.Named(name, value) }
