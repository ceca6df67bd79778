#!/usr/bin/env bash
# Runs tests/ws/smoke.py (Python's `websockets` client) against a codebuffd it starts: the
# debug binary, on a free loopback port, with a token, the in-memory store, scratch data and
# working directories, and mock sessions by default. Stops the daemon (SIGTERM, then SIGKILL
# after 10 s) and removes the directories however the script ends.
set -euo pipefail
cd "$(dirname "$0")/../.."

cargo build --quiet --bin codebuffd
bin="$(cd "${CARGO_TARGET_DIR:-target}/debug" && pwd)/codebuffd"
dir="$(mktemp -d)"
token="ws-smoke-$RANDOM$RANDOM"
pid=

stop() {
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap stop EXIT

# Sessions work in the daemon's working directory: a scratch one, never the checkout.
mkdir "$dir/work"
(cd "$dir/work" && exec "$bin" server --host 127.0.0.1 --port 0 --token "$token" \
  --store memory --data-dir "$dir/data" --ws-default-agent mock) >"$dir/stdout" 2>"$dir/stderr" &
pid=$!

# The ready signal: {"event":"listening","url":…} on stdout.
url=
for _ in $(seq 200); do
  url="$(sed -n 's/.*"url":"\([^"]*\)".*/\1/p' "$dir/stdout" | head -n1)"
  [[ -n "$url" ]] && break
  kill -0 "$pid" 2>/dev/null || { cat "$dir/stderr" >&2; echo "codebuffd exited" >&2; exit 1; }
  sleep 0.1
done
[[ -n "$url" ]] || { echo "codebuffd did not announce its address" >&2; exit 1; }

# $PYTHON: a Python with `websockets` (.ci/run passes its virtual environment's).
"${PYTHON:-python3}" tests/ws/smoke.py "$url" "$token"
