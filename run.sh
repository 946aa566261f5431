#!/usr/bin/env bash
# Prima's two set-up commands (README): `./run.sh serve [prima serve flags]` and `./run.sh test [pytest args]`.
# Both create ./.venv on first use and install the pinned dependencies from requirements.lock;
# with PRIMA_EXTRAS=spark, from requirements-spark.lock (adds pyspark for Spark sources).
set -euo pipefail
cd "$(dirname "$0")"
VENV="${PRIMA_VENV:-.venv}"
PY="${PYTHON:-python3}"

LOCK=requirements.lock
[ "${PRIMA_EXTRAS:-}" = "spark" ] && LOCK=requirements-spark.lock

ensure_env() {
  local stamp="$VENV/.prima-lock"
  if [ -x "$VENV/bin/prima" ] && [ -f "$stamp" ] && cmp -s "$LOCK" "$stamp"; then
    return
  fi
  "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "Python 3.11+ is required" >&2; exit 1; }
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$LOCK"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -e .
  cp "$LOCK" "$stamp"
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  serve) ensure_env; exec "$VENV/bin/prima" serve "$@" ;;
  test)  ensure_env; exec "$VENV/bin/python" -m pytest "$@" ;;
  *) echo "usage: ./run.sh serve [--port P ...] | ./run.sh test [pytest args]" >&2; exit 2 ;;
esac
