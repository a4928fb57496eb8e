#!/bin/bash
# Tear down what slurm_up.sh started: cancel jobs, stop slurmd(s), slurmctld, munged (by PID), rm $SLURM_BASE.
set -uo pipefail
BASE=${SLURM_BASE:-/var/tmp/lair-slurm}
[ -d "$BASE" ] || exit 0
export SLURM_CONF="$BASE/etc/slurm.conf"

# 1. cancel every job and wait (<=10s) until slurmctld has no pending/running/completing job left
timeout 5 scancel --user=root --full 2>/dev/null
for _ in $(seq 100); do
  [ -z "$(timeout 2 squeue -h -t PD,R,CG,S -o %i 2>/dev/null)" ] && break; sleep 0.1
done

kill_tree() {  # kill_tree SIG PID : children first
  local c; for c in $(pgrep -P "$2"); do kill_tree "$1" "$c"; done
  kill "-$1" "$2" 2>/dev/null
}
stop_all() {   # stop_all PIDFILE... : SIGTERM all at once, wait <=5s, then SIGKILL survivors
  local f p pids=()
  for f in "$@"; do [ -f "$f" ] && p=$(cat "$f") && kill -TERM "$p" 2>/dev/null && pids+=("$p"); done
  for _ in $(seq 50); do
    local alive=0; for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && return 0; sleep 0.1
  done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done; true
}
# 2. all daemons in parallel (each takes ~2s on SIGTERM; state is thrown away anyway)
stop_all "$BASE"/pids/slurmd-*.fg.pid "$BASE/pids/slurmctld.fg.pid" "$BASE/pids/munged.pid" \
         "$BASE/pids/slurmdbd.fg.pid" "$BASE/pids/mariadbd.fg.pid"
# 3. stray slurmstepd (daemonised, reparented to init) still carrying our tag, plus their tasks
for p in $(pgrep -x slurmstepd); do
  tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "LAIR_SLURM_BASE=$BASE" && kill_tree KILL "$p"
done
rm -rf "$BASE"
