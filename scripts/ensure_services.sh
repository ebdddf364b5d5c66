#!/usr/bin/env bash
# Make sure the local PostgreSQL and Redis the tests and the demo use are up.
# Starts whichever is down (if installed) and waits, bounded, until it answers.
set -euo pipefail

PG_HOST=127.0.0.1
PG_PORT=5432
REDIS_HOST=127.0.0.1
REDIS_PORT=6379
WAIT_SECONDS=30

log() { echo "ensure_services: $*"; }
die() { echo "ensure_services: $*" >&2; exit 1; }

# wait_until LABEL CMD... — poll CMD every 0.5s for at most WAIT_SECONDS.
wait_until() {
    local label=$1; shift
    local i
    for ((i = 0; i < WAIT_SECONDS * 2; i++)); do
        if "$@" >/dev/null 2>&1; then
            log "$label is ready"
            return 0
        fi
        sleep 0.5
    done
    die "$label did not become ready within ${WAIT_SECONDS}s"
}

pg_ready() { pg_isready -q -h "$PG_HOST" -p "$PG_PORT"; }
redis_ready() { [[ "$(redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" ping 2>/dev/null)" == "PONG" ]]; }

# --- PostgreSQL -------------------------------------------------------------
command -v pg_isready >/dev/null 2>&1 \
    || die "PostgreSQL client tools (pg_isready) are not installed; install postgresql"
if pg_ready; then
    log "PostgreSQL already running on $PG_HOST:$PG_PORT"
else
    command -v pg_ctlcluster >/dev/null 2>&1 \
        || die "PostgreSQL is not running on $PG_HOST:$PG_PORT and pg_ctlcluster is not installed"
    [[ -d /etc/postgresql ]] && [[ -n "$(ls -A /etc/postgresql)" ]] \
        || die "PostgreSQL server is not installed (no cluster under /etc/postgresql)"
    pg_version=$(ls /etc/postgresql | sort -V | tail -n 1)
    log "starting PostgreSQL $pg_version cluster 'main'"
    pg_ctlcluster --skip-systemctl-redirect "$pg_version" main start
    wait_until "PostgreSQL" pg_ready
fi

# --- Redis ------------------------------------------------------------------
command -v redis-cli >/dev/null 2>&1 \
    || die "Redis client (redis-cli) is not installed; install redis-tools / redis"
if redis_ready; then
    log "Redis already running on $REDIS_HOST:$REDIS_PORT"
else
    command -v redis-server >/dev/null 2>&1 \
        || die "Redis is not running on $REDIS_HOST:$REDIS_PORT and redis-server is not installed"
    log "starting redis-server on $REDIS_HOST:$REDIS_PORT"
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$REDIS_PORT" --save "" --appendonly no
    wait_until "Redis" redis_ready
fi

# --- Databases --------------------------------------------------------------
# The base databases the settings name: the test settings' NAME (makemigrations --check
# reads its history; pytest-django makes its own test_<NAME>) and the demo's database.
ensure_db() {
    local db=$1
    if [[ "$(psql -h "$PG_HOST" -p "$PG_PORT" -U postgres -d postgres -Atc \
            "SELECT 1 FROM pg_database WHERE datname = '$db'")" == "1" ]]; then
        log "database $db exists"
    else
        log "creating database $db"
        createdb -h "$PG_HOST" -p "$PG_PORT" -U postgres "$db"
    fi
}
command -v psql >/dev/null 2>&1 && command -v createdb >/dev/null 2>&1 \
    || die "PostgreSQL client tools (psql, createdb) are not installed"
ensure_db "${ULTIMATE_JOBS_TEST_DB:-ultimate_jobs}"
ensure_db "ultimate_jobs_demo"
