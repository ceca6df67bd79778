#!/usr/bin/env bash
# Runs the README's examples that use the mock agent, in the README's order, as a new user would
# type them: an empty HOME, no key, `codebuffd` on PATH (the debug binary), the step-1 server of
# "Set up" on a free loopback port. tests/readme/blocks.py says what is taken and how; a command
# that fails, or prints something else than its `# → …` comment says, fails the run.
#
# Needs: curl, jq, Node.js; acpx (tests/acp's npm ci), sandbox-agent (tests/acp-http's npm ci) and
# a Python with `websockets` ($PYTHON, default python3) for the blocks in those languages.
# Stops the server (SIGTERM, then SIGKILL after 10 s) and removes what it made however it ends.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo="$PWD"

for tool in curl jq node; do
  command -v "$tool" >/dev/null || { echo "tests/readme: $tool is needed" >&2; exit 1; }
done
acpx_bin="$repo/tests/acp/node_modules/.bin"
[[ -x "$acpx_bin/acpx" ]] || { echo "tests/readme: acpx is needed (npm ci in tests/acp)" >&2; exit 1; }
[[ -d "$repo/tests/acp-http/node_modules/sandbox-agent" ]] \
  || { echo "tests/readme: sandbox-agent is needed (npm ci in tests/acp-http)" >&2; exit 1; }
python="${PYTHON:-python3}"
"$python" -c 'import websockets.sync.client' \
  || { echo "tests/readme: $python has no websockets (set PYTHON)" >&2; exit 1; }

cargo build --quiet --bin codebuffd
bin_dir="$(cd "${CARGO_TARGET_DIR:-target}/debug" && pwd)"

dir="$(mktemp -d)"
stop() {
  local pid
  pid="$(cat "$dir/server.pid" 2>/dev/null || true)"
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap stop EXIT

port="$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
mkdir -p "$dir/home" "$dir/blocks"
# A failed HTTP request fails its command (the README's `curl -s` would print the problem and
# go on): curl reads this from the user's ~/.curlrc.
echo 'fail-with-body' > "$dir/home/.curlrc"
ln -s "$repo/tests/acp-http/node_modules" "$dir/blocks/node_modules"
readme="${README:-README.md}"  # another file: to check that this check fails
echo "tests/readme: $("$python" tests/readme/blocks.py "$readme" "$dir/blocks" "$port")"

cat > "$dir/prelude.sh" <<'EOF'
set -euo pipefail
trap 'echo "README: this command failed (exit $?): $BASH_COMMAND" >&2' ERR
__block() { printf '\n-- README block %s (%s)\n' "$1" "$2" >&2; }
# `cargo run --release -- server ARGS` of "Set up": the debug binary, in the background, on
# $__PORT; waits for its listening line.
__server() {
  codebuffd server "$@" --port "$__PORT" >"$__DIR/server.out" 2>"$__DIR/server.err" &
  echo $! >"$__DIR/server.pid"
  for _ in $(seq 300); do
    grep -q '"event":"listening"' "$__DIR/server.out" 2>/dev/null && return 0
    kill -0 "$(cat "$__DIR/server.pid")" 2>/dev/null || break
    sleep 0.1
  done
  cat "$__DIR/server.err" >&2
  echo "README: the step-1 server did not start" >&2
  return 1
}
# __check RETRY PATTERN EXPECTED <<< COMMAND: the command prints what the README says.
__check() {
  local retry=$1 pattern=$2 want=$3 cmd out tries
  cmd="$(cat)"
  tries=1
  [[ "$retry" == 1 ]] && tries=50
  for _ in $(seq "$tries"); do
    out="$(eval "$cmd")" || { echo "README: \`$cmd\` failed" >&2; return 1; }
    out_flat="${out//[[:space:]]/}"
    # shellcheck disable=SC2053
    if [[ "$out_flat" == $pattern ]]; then
      printf '%s\n' "$out"
      return 0
    fi
    sleep 0.2
  done
  printf 'README: `%s`\n  printed:     %s\n  README says: %s\n' "$cmd" "$out" "$want" >&2
  return 1
}
__python() { timeout 60 "$__PYTHON" "$1"; }
__js() { (cd "$(dirname "$1")" && timeout 60 node "$1"); }
EOF

cd "$dir/home"
# The README's `mktemp -d`s land in $dir, removed with it.
mkdir -p "$dir/tmp"
env -i HOME="$dir/home" PATH="$bin_dir:$acpx_bin:$(dirname "$(command -v node)"):/usr/local/bin:/usr/bin:/bin" \
  TMPDIR="$dir/tmp" TERM=dumb __PORT="$port" __DIR="$dir" __PYTHON="$(command -v "$python")" \
  bash -c 'source "$__DIR/prelude.sh"; source "$__DIR/blocks/readme.sh"'
echo "tests/readme: every block ran as the README says"
