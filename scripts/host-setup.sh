#!/usr/bin/env bash
# Make this machine ready for lair's integration tests: a Docker engine, podman, sshd (for the
# network-namespace SSH nodes the tests create) and Slurm + munge (a private cluster per test
# session). Idempotent; needs root on Debian/Ubuntu.
# Without root or apt it only reports what is missing (the tests that need it then fail loudly).
set -euo pipefail
. "$(dirname "$0")/daemon.sh"
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v podman >/dev/null || need+=(podman)
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ip >/dev/null || need+=(iproute2)
command -v iptables >/dev/null || need+=(iptables)
command -v nsenter >/dev/null || need+=(util-linux)
command -v curl >/dev/null || need+=(curl)
slurm=()  # Slurm from Debian for the Slurm launch tests (no recommends: 5 s, 14 MB)
command -v slurmctld >/dev/null || slurm+=(slurm-wlm)
command -v munged >/dev/null || slurm+=(munge)
if [ ${#need[@]} -gt 0 ] || [ ${#slurm[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "host-setup: missing ${need[*]} ${slurm[*]} (install them as root)" >&2; exit 1
  fi
  timeout 300 apt-get update -qq
  [ ${#need[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq "${need[@]}" >/dev/null
  [ ${#slurm[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive timeout 600 \
    apt-get install -y -qq --no-install-recommends "${slurm[@]}" >/dev/null
fi
if ! timeout 5 docker info >/dev/null 2>&1; then
  # no systemd on CI machines: start the daemon by hand (it creates docker0 + iptables rules itself)
  start_daemon /var/log/dockerd.log dockerd   # no inherited descriptors (a caller's flock stays its own)
  for _ in $(seq 1 120); do timeout 5 docker info >/dev/null 2>&1 && break; sleep 0.5; done
  timeout 5 docker info >/dev/null || { echo "host-setup: dockerd did not start" >&2; tail -20 /var/log/dockerd.log >&2; exit 1; }
fi
mkdir -p /run/sshd && chmod 0755 /run/sshd   # the test nodes' sshds are started by lair.testing.nodes (close_fds)
echo "host-setup: docker $(docker version --format '{{.Server.Version}}') and sshd ready" >&2
