# Sourced by .ci/run (and usable by hand: `source .ci/postgres.sh`): installs
# PostgreSQL from Debian's packages if it is missing, starts a throwaway server
# as the postgres user on a free loopback port, and exports
# TERMFENCE_POSTGRES_DSN. pg_stop_termfence stops it and removes its data.

pg_start_termfence() {
  local bin
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    echo "postgres: installing postgresql from Debian's packages"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  fi
  PG_TERMFENCE_DIR=$(mktemp -d /tmp/termfence-pg.XXXXXX)
  chown postgres:postgres "$PG_TERMFENCE_DIR"
  local run=(runuser -u postgres --)
  [ "$(id -u)" -ne 0 ] && run=()
  "${run[@]}" "$bin/initdb" -D "$PG_TERMFENCE_DIR/data" -A trust -U postgres >/dev/null
  # A port nobody answers on may still refuse a bind (a server shutting
  # down, another one starting): try the next port then.
  local port started=""
  for port in $(seq 55432 55632); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi
    if "${run[@]}" "$bin/pg_ctl" -D "$PG_TERMFENCE_DIR/data" -l "$PG_TERMFENCE_DIR/log" -w -t 60 \
      -o "-p $port -k $PG_TERMFENCE_DIR -c listen_addresses=127.0.0.1 -c fsync=on -c max_connections=200" start >/dev/null; then
      started=1
      break
    fi
  done
  [ -n "$started" ] || { echo "postgres: could not start a server on any port 55432-55632 (see $PG_TERMFENCE_DIR/log)" >&2; return 1; }
  "${run[@]}" "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres termfence
  PG_TERMFENCE_BIN=$bin
  export TERMFENCE_POSTGRES_DSN="postgres://postgres@127.0.0.1:$port/termfence?sslmode=disable"
  echo "postgres: server on 127.0.0.1:$port, TERMFENCE_POSTGRES_DSN exported"
}

pg_stop_termfence() {
  [ -n "${PG_TERMFENCE_DIR:-}" ] || return 0
  local run=(runuser -u postgres --)
  [ "$(id -u)" -ne 0 ] && run=()
  "${run[@]}" "$PG_TERMFENCE_BIN/pg_ctl" -D "$PG_TERMFENCE_DIR/data" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$PG_TERMFENCE_DIR"
}
