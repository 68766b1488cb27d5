#!/usr/bin/env bash
# How long the test loop takes, as CI sees it: a fresh clone of HEAD with an empty compiler cache
# (device/objcache.py), its own virtualenv, then `make test` (full) or `make test-fast`. Prints
# the install and test wall times, pytest's summary line and the 20 slowest tests.
#
#   bench/ci_time.sh [full|fast]      (default full; the toolchain must already be installed:
#                                      `make toolchain`, as .ci/run's apt-get step does)
# Set VENV_FROM=path/to/.venv to reuse an installed virtualenv and time the tests alone.
set -euo pipefail
tier="${1:-full}"
case "$tier" in full) target=test ;; fast) target=test-fast ;;
    *) echo "usage: $0 [full|fast]" >&2; exit 2 ;; esac

repo="$(cd "$(dirname "$0")/.." && pwd)"
venv_from="${VENV_FROM:+$(cd "$VENV_FROM" && pwd)}"  # absolute before the cd below
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git clone -q "$repo" "$work/clone"
cd "$work/clone"
export TINYTRAIN_CACHE_DIR="$work/objcache"  # CI starts without cached objects

t0=$(date +%s)
if [ -n "$venv_from" ]; then
    ln -s "$venv_from" .venv
    touch .venv/.installed-test  # make's stamp: the venv is ready
else
    make -s install >/dev/null
fi
t1=$(date +%s)
make "$target" PYTEST_ARGS="--durations=20" 2>&1 | tee "$work/log" | tail -40
t2=$(date +%s)
echo
echo "install: $(( (t1 - t0) / 60 )) min $(( (t1 - t0) % 60 )) s; tests ($tier):" \
     "$(( (t2 - t1) / 60 )) min $(( (t2 - t1) % 60 )) s"
