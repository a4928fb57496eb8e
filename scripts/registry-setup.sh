#!/usr/bin/env bash
# What the registry tests and benchmarks need on the host, installed only where missing (idempotent,
# cheap when everything is there): a PostgreSQL answering on 127.0.0.1:5432 with trust auth and a
# database `test`, Chromium from Debian (Playwright drives it; no browser is downloaded), wrk, and nginx
# (the TLS reverse proxy of the two-host deployment test, which starts its own).
set -euo pipefail
need=()
command -v chromium >/dev/null || need+=(chromium)
command -v wrk >/dev/null || need+=(wrk)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx)
command -v redis-server >/dev/null || need+=(redis-server) # the Redis outage test starts its own
pg_up() { command -v pg_isready >/dev/null && pg_isready -q -h 127.0.0.1 -p 5432; }
pg_up || command -v pg_ctlcluster >/dev/null || need+=(postgresql)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "registry-setup: missing ${need[*]} (install them as root)" >&2; exit 1
  fi
  timeout 300 apt-get update -qq
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if ! pg_up; then
  # a Debian cluster started by hand (no systemd on CI machines), trust auth on the loopback only
  ver=$(ls /etc/postgresql | sort -n | tail -1)
  hba=/etc/postgresql/$ver/main/pg_hba.conf
  grep -q "lair-registry-tests" "$hba" || sed -i '1i host all all 127.0.0.1/32 trust # lair-registry-tests' "$hba"
  pg_ctlcluster "$ver" main start
  for _ in $(seq 1 100); do pg_up && break; sleep 0.2; done
  pg_up || { echo "registry-setup: PostgreSQL did not start" >&2; exit 1; }
fi
psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1 \
  || psql -h 127.0.0.1 -U postgres -d postgres -qc "CREATE DATABASE test"
# the shared rate-limit tests use a Redis on 6379: start one (in memory) if none answers
redis-cli -p 6379 ping >/dev/null 2>&1 \
  || redis-server --port 6379 --bind 127.0.0.1 --save '' --appendonly no --daemonize yes >/dev/null
echo "registry-setup: PostgreSQL, Redis, chromium $(chromium --version 2>/dev/null | awk '{print $2}'), wrk and nginx ready" >&2
