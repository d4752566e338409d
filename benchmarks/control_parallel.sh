#!/usr/bin/env bash
# The cases of control.py side by side, each part on its own two cores (taskset), so that every
# time is a 2-core time; then merged into results/control.json. Needs 16 cores for 8 parts.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
BUDGET=${BUDGET:-240}
LOGS=${LOGS:-/tmp}
parts=(
  "ilqr:swing_up/ILQR/vi reach/ILQR/vi reach/SingleShooting/vi reach/MultipleShooting/vi reach/SingleShooting/tsit5"
  "pendubot_ilqr:pendubot/ILQR/vi chain/ILQR/vi"
  "swing_up_shooting:swing_up/SingleShooting/vi swing_up/MultipleShooting/vi"
  "swing_up_tsit5:swing_up/SingleShooting/tsit5"
  "pendubot_shooting:pendubot/SingleShooting/vi pendubot/MultipleShooting/vi"
  "pendubot_tsit5:pendubot/SingleShooting/tsit5 chain/SingleShooting/tsit5"
  "chain_shooting:chain/SingleShooting/vi chain/MultipleShooting/vi"
  "batch:batch"
)
rm -rf results/control_parts
core=0
for entry in "${parts[@]}"; do
  name=${entry%%:*}
  cases=${entry#*:}
  # shellcheck disable=SC2086
  taskset -c "$core,$((core + 1))" env JAX_PLATFORMS=cpu \
    timeout "${LIMIT:-540}" "$PY" control.py $cases --budget "$BUDGET" --part "$name" > "$LOGS/control_$name.log" 2>&1 &
  core=$((core + 2))
done
wait || true
"$PY" control.py --merge
