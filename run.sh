#!/usr/bin/env bash
# Prima's two set-up commands (README): `./run.sh serve [prima serve flags]` and `./run.sh test [pytest args]`.
# Both create ./.venv on first use and install pinned dependencies: `serve` the run-time set
# (requirements.lock), `test` run-time plus dev tools (requirements-dev.lock); with
# PRIMA_EXTRAS=spark, also requirements-spark.lock (pyspark for Spark sources); with s3,
# requirements-s3.lock (boto3, for cubes in an object store); both: PRIMA_EXTRAS=spark,s3.
set -euo pipefail
cd "$(dirname "$0")"
VENV="${PRIMA_VENV:-.venv}"
PY="${PYTHON:-python3}"

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  serve) LOCKS=(requirements.lock) ;;
  test)  LOCKS=(requirements-dev.lock) ;;
  *) echo "usage: ./run.sh serve [--port P ...] | ./run.sh test [pytest args]" >&2; exit 2 ;;
esac
for extra in ${PRIMA_EXTRAS:+${PRIMA_EXTRAS//,/ }}; do  # e.g. PRIMA_EXTRAS=spark,s3
  case "$extra" in
    spark|s3) LOCKS+=("requirements-$extra.lock") ;;
    *) echo "PRIMA_EXTRAS: unknown extra '$extra' (spark, s3)" >&2; exit 2 ;;
  esac
done

lock_digest() { cat "$@" | sha256sum | cut -d' ' -f1; }

# The venv records the digest of every lock set installed into it; a set already installed (or
# the dev set, which contains the run-time one) needs nothing.
ensure_env() {
  local stamp="$VENV/.prima-locks" want
  want="$(lock_digest "${LOCKS[@]}")"
  if [ -x "$VENV/bin/prima" ] && [ -f "$stamp" ]; then
    if grep -qx "$want" "$stamp"; then return; fi
    if [ "${LOCKS[*]}" = "requirements.lock" ] && grep -qx "$(lock_digest requirements-dev.lock)" "$stamp"; then return; fi
  fi
  "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "Python 3.11+ is required" >&2; exit 1; }
  echo "prima: first run — creating $VENV and installing pinned dependencies (${LOCKS[*]}); this takes a minute or two" >&2
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  local reqs=()
  for lock in "${LOCKS[@]}"; do reqs+=(-r "$lock"); done
  # The locks go in with uv (pinned in requirements-installer.lock, from PyPI like the rest): 35 s
  # where pip took 68 s for the dev and Spark locks on a fresh 2-core machine with no cache, .pyc
  # files compiled by both. Compiling every module up front costs uv 13 s of those 29 s (from its
  # cache) but is kept: where PYTHONDONTWRITEBYTECODE is set (as on CI) nothing compiled later is
  # kept, and every process — servers, CLI calls, the tests' spawned workers — recompiled what it
  # imported (two CI runs in the same test order: 703 s of tests without it, 638 s with it). pip
  # installs them if uv cannot be had.
  local pip=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --progress-bar off)
  if "${pip[@]}" -r requirements-installer.lock >/dev/null 2>&1 && [ -x "$VENV/bin/uv" ]; then
    pip=("$VENV/bin/uv" pip install --quiet --compile-bytecode --python "$VENV/bin/python")
  fi
  "${pip[@]}" "${reqs[@]}"
  echo "prima: installing Prima itself into $VENV" >&2
  "${pip[@]}" --no-deps -e .
  # pyspark comes only as a source archive, and uv fetches it anew for every venv (the registry's
  # answer carries no caching headers), unpacking and building it into a fresh revision of its cache
  # and leaving the last one behind: ~650 MB per venv. 85 venvs filled the disk and a CI run failed
  # unpacking pyspark ("No space left on device"). Pruning drops only entries nothing points to
  # (here 66.8 GiB in 15 s; 0.02 s when there is nothing to drop) and keeps what the next install reuses.
  if [ "${pip[0]}" = "$VENV/bin/uv" ]; then "$VENV/bin/uv" cache prune --quiet || true; fi
  echo "$want" >> "$stamp"
  echo "prima: environment ready" >&2
}

ensure_env
# Prima's own modules compiled once (~0.4 s; nothing when current): the venv's packages were compiled
# at install, but where PYTHONDONTWRITEBYTECODE is set (as on CI) every process — servers, CLI calls,
# fit workers, the tests' spawned pools — compiled these from source on import, and kept nothing: 0.2 s
# of each server's 1.45 s start-up, ~25 s of CPU over the test suite (py-spy over a whole run).
"$VENV/bin/python" -m compileall -q -j 0 app engine privacy storage tests bench >/dev/null 2>&1 || true
case "$cmd" in
  serve) exec "$VENV/bin/prima" serve "$@" ;;
  test)  exec "$VENV/bin/python" -m pytest "$@" ;;
esac
