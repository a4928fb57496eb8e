# start_daemon LOG COMMAND...: start a daemon that inherits none of the caller's file descriptors
# (a lock held by the caller, e.g. `flock`, must not be held for the daemon's whole life), in its
# own session, stdin from /dev/null, stdout and stderr to LOG. Prints nothing; $! is its pid.
# Source this file: . scripts/daemon.sh
start_daemon() {
  local log=$1
  shift
  (
    for fd in /proc/$BASHPID/fd/*; do
      n=${fd##*/}
      if [ "$n" -gt 2 ] 2>/dev/null; then eval "exec $n>&-"; fi
    done 2>/dev/null
    exec setsid "$@" >"$log" 2>&1 </dev/null
  ) &
}
