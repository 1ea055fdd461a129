# Sourced by the benchmarks that measure the working tree against a git
# revision: build_base REV DEST [FILL] builds cmd/mcptrail as of REV into
# DEST (and bench/fill as of REV into FILL), in a worktree removed again,
# and prints REV's short hash.
# DEST runs REV's binary with REV's own config.yaml: run from the
# repository's root, it would otherwise read the working tree's, which may
# hold keys REV does not know (every key there is its default, so both
# sides run with their defaults).
build_base() {
	local tmp
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/mcptrail-base.XXXXXX")
	git worktree add --detach --quiet "$tmp/src" "$1"
	(cd "$tmp/src" && go build -o "$2.bin" ./cmd/mcptrail)
	if [ -n "${3:-}" ]; then
		(cd "$tmp/src" && go build -o "$3" ./bench/fill)
	fi
	git worktree remove --force "$tmp/src"
	rm -rf "$tmp"
	git show "$1:config.yaml" >"$2.config.yaml" 2>/dev/null || : >"$2.config.yaml"
	printf '#!/bin/sh\nexec "%s" --config "%s" "$@"\n' "$(realpath "$2.bin")" "$(realpath "$2.config.yaml")" >"$2"
	chmod +x "$2"
	git rev-parse --short "$1"
}
