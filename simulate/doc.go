// Package simulate generates realistic, deterministic MCP gateway traffic for
// the Proxmox MCP server, for the demo, tests and benchmarks.
//
// A scenario is a mix of session kinds (an ops agent investigating VMs, a CI
// pipeline, a dashboard, a nightly inventory job, ...) plus rare incidents
// (runaway polling loops, destructive calls, retry storms, denied probes).
// Sessions arrive as a non-homogeneous Poisson process that follows a weekly
// office-hours profile; each session is planned in full when it starts (its
// calls, their timing and the gateway's decision on each), and a heap of
// active sessions merges them into one stream in time order. Memory therefore
// grows with the number of concurrently active sessions, never with the number
// of events, and 10M events stream through a callback without being held.
//
// Everything is derived from Options through a generator defined in this
// package (xoshiro256**), so the same Options give the same events byte for
// byte with the same Go toolchain and architecture.
//
// Emitted events share their Args and ArgKeys slices between events with the
// same arguments: treat them as read-only.
package simulate
