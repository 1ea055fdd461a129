// Package threadprio gives the goroutine that carries a process's
// bottleneck a core of its own where the operating system allows it.
//
// `mcptrail ingest` appends every batch to DuckDB on one thread while
// decoders, the garbage collector and the reader run beside it on a
// machine with few cores: left to the scheduler's fair shares, the
// appending thread loses part of its core to them although they have time
// to spare. Favor locks that goroutine to its thread and lowers every
// other thread of the process (their niceness), so that they take the
// time the bottleneck leaves.
package threadprio

import "time"

// Sweep is how often Favor lowers the threads started since its last look.
const Sweep = 100 * time.Millisecond
