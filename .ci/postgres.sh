#!/usr/bin/env bash
# A throwaway Postgres server for the store test suite: loopback only, in a directory of its
# own, never the system's cluster.
#
#   .ci/postgres.sh start   install Postgres if missing, start the server, create the test
#                           database, print its URL (for CODEBUFFD_TEST_POSTGRES_URL)
#   .ci/postgres.sh stop    stop the server and delete its directory
#   .ci/postgres.sh url     print the URL
#
# Both commands are idempotent. Environment: CODEBUFFD_PG_PORT (54329), CODEBUFFD_PG_DIR
# (/tmp/codebuffd-postgres-PORT). Runs as root (the server then runs as the `postgres` user)
# or as any other user (the server runs as that user).
set -euo pipefail

port=${CODEBUFFD_PG_PORT:-54329}
dir=${CODEBUFFD_PG_DIR:-/tmp/codebuffd-postgres-$port}
db=codebuffd_test
url="postgres://postgres@127.0.0.1:$port/$db"

say() { printf '%s\n' "$*" >&2; }

bindir() {
  local found
  found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$found" ] && [ -x "$found/initdb" ] && printf '%s\n' "$found"
}

install_postgres() {
  if bindir >/dev/null; then return; fi
  if [ "$(id -u)" != 0 ]; then
    say "postgres.sh: Postgres is not installed and installing it needs root"
    exit 1
  fi
  say "postgres.sh: installing Postgres"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
}

# Runs a Postgres program as the server's owner.
as_owner() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

running() {
  local bin
  bin=$(bindir) || return 1
  [ -f "$dir/PG_VERSION" ] && as_owner "$bin/pg_ctl" status -D "$dir" >/dev/null 2>&1
}

start() {
  install_postgres
  local bin
  bin=$(bindir)
  if ! running; then
    if [ ! -f "$dir/PG_VERSION" ]; then
      rm -rf "$dir"
      mkdir -p "$dir"
      chmod 700 "$dir"
      if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$dir"; fi
      as_owner "$bin/initdb" -D "$dir" -A trust -U postgres --no-instructions >"$dir.initdb.log" 2>&1 || {
        cat "$dir.initdb.log" >&2
        exit 1
      }
    fi
    if ! as_owner "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $port -k $dir" start >/dev/null; then
      say "postgres.sh: the server did not start; its log:"
      cat "$dir/server.log" >&2 || true
      exit 1
    fi
  fi
  local psql=("$bin/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1)
  if [ "$("${psql[@]}" -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'")" != 1 ]; then
    "${psql[@]}" -c "CREATE DATABASE $db" >/dev/null
  fi
  printf '%s\n' "$url"
}

stop() {
  local bin
  if bin=$(bindir) && [ -f "$dir/PG_VERSION" ]; then
    if running; then
      as_owner "$bin/pg_ctl" -D "$dir" -m fast -w -t 60 stop >/dev/null
    fi
  fi
  rm -rf "$dir" "$dir.initdb.log"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  url) printf '%s\n' "$url" ;;
  *)
    say "usage: $0 start|stop|url"
    exit 2
    ;;
esac
