# Sourced by the benchmarks that measure the working tree against a git
# revision: build_base REV DEST builds cmd/mcptrail as of REV into DEST,
# in a worktree removed again, and prints REV's short hash.
build_base() {
	local tmp
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/mcptrail-base.XXXXXX")
	git worktree add --detach --quiet "$tmp/src" "$1"
	(cd "$tmp/src" && go build -o "$2" ./cmd/mcptrail)
	git worktree remove --force "$tmp/src"
	rm -rf "$tmp"
	git rev-parse --short "$1"
}
