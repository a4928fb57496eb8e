#!/bin/bash
# Bring up a throw-away Slurm cluster (munged + slurmctld + N slurmd) on loopback,
# entirely under $SLURM_BASE. Needs root and: apt-get install --no-install-recommends slurm-wlm munge
# Usage: slurm_up.sh   (env: SLURM_BASE, SLURM_NODES, SLURM_NODE_CPUS, SLURM_PORT_BASE,
#                      SLURM_NETNS="NETNS=ADDR ..." -> one slurmd per network namespace at its own
#                      address (SLURM_NODES is then their count), SLURM_CTLD_ADDR = this host's
#                      address the namespaces reach (their bridge's),
#                      SLURM_ACCOUNTING=1 -> also MariaDB + slurmdbd so sacct works;
#                      needs apt-get install --no-install-recommends slurmdbd mariadb-server)
# Afterwards:  export SLURM_CONF=$SLURM_BASE/etc/slurm.conf   (printed on stdout)
set -euo pipefail

BASE=${SLURM_BASE:-/var/tmp/lair-slurm}
NODES=${SLURM_NODES:-2}
ACCT=${SLURM_ACCOUNTING:-0}
CPUS=${SLURM_NODE_CPUS:-4}          # per fake node; may exceed real cores (config_overrides)
PORT=${SLURM_PORT_BASE:-16817}      # ctld=PORT, slurmdbd=PORT+1, mariadb=PORT+2, slurmd i=PORT+10+i
HOST=$(hostname -s)
NETNS=${SLURM_NETNS:-}
CTLD_ADDR=${SLURM_CTLD_ADDR:-127.0.0.1}
if [ -n "$NETNS" ]; then NODES=$(echo $NETNS | wc -w); fi

if [ -e "$BASE" ]; then echo "refusing: $BASE exists (run slurm_down.sh)" >&2; exit 1; fi
mkdir -p "$BASE"/{etc,munge,state,log,pids} && chmod 0755 "$BASE" "$BASE"/*

# ---- munge: private key + private socket, so the host's /etc/munge and /run/munge are untouched
dd if=/dev/urandom of="$BASE/munge/munge.key" bs=1024 count=1 status=none
chmod 0400 "$BASE/munge/munge.key"
SOCK="$BASE/munge/munge.socket"
munged --force --key-file="$BASE/munge/munge.key" --socket="$SOCK" \
       --pid-file="$BASE/pids/munged.pid" --log-file="$BASE/log/munged.log" \
       --seed-file="$BASE/munge/munged.seed"
for _ in $(seq 50); do [ -S "$SOCK" ] && break; sleep 0.1; done
munge -n -S "$SOCK" | unmunge -S "$SOCK" >/dev/null   # sanity

# ---- optional accounting: private MariaDB on 127.0.0.1:PORT+2 + slurmdbd on PORT+1
if [ "$ACCT" = 1 ]; then
  ACCT_LINES="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$((PORT + 1))
# munge socket for slurmdbd traffic (AuthInfo is not used for it)
AccountingStoragePass=$SOCK"
else
  ACCT_LINES="AccountingStorageType=accounting_storage/none"
fi

# ---- slurm.conf
LAST=$((PORT + 10 + NODES))
NODE_LINES="NodeName=n[1-$NODES] NodeHostname=$HOST NodeAddr=127.0.0.1 Port=[$((PORT + 11))-$LAST] CPUs=$CPUS RealMemory=1000 State=UNKNOWN"
if [ -n "$NETNS" ]; then  # one line per node: its own address
  NODE_LINES=""; i=0
  for spec in $NETNS; do
    i=$((i + 1))
    NODE_LINES="$NODE_LINES
NodeName=n$i NodeHostname=$HOST NodeAddr=${spec#*=} Port=$((PORT + 10 + i)) CPUs=$CPUS RealMemory=1000 State=UNKNOWN"
  done
fi
cat > "$BASE/etc/slurm.conf" <<EOF
ClusterName=lairtest
SlurmctldHost=$HOST($CTLD_ADDR)
SlurmctldPort=$PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCK
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool/%n
SlurmctldPidFile=$BASE/pids/slurmctld.pid
SlurmdPidFile=$BASE/pids/slurmd-%n.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
$ACCT_LINES
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=2
MinJobAge=600
MessageTimeout=10
$NODE_LINES
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$BASE/etc/slurm.conf"
export LAIR_SLURM_BASE="$BASE"   # inherited by slurmstepd: lets slurm_down.sh find strays

if [ "$ACCT" = 1 ]; then
  mkdir -p "$BASE/mysql"
  mariadb-install-db --user=root --datadir="$BASE/mysql/data" --skip-test-db \
      --auth-root-authentication-method=normal >"$BASE/log/mariadb-install.log" 2>&1
  setsid mariadbd --no-defaults --user=root --datadir="$BASE/mysql/data" \
      --socket="$BASE/mysql/mysqld.sock" --bind-address=127.0.0.1 --port=$((PORT + 2)) \
      --pid-file="$BASE/pids/mariadbd.pid" --log-error="$BASE/log/mariadbd.log" \
      --innodb-buffer-pool-size=64M --skip-log-bin </dev/null >/dev/null 2>&1 &
  echo $! > "$BASE/pids/mariadbd.fg.pid"
  for _ in $(seq 200); do
    mariadb --no-defaults -S "$BASE/mysql/mysqld.sock" -uroot -e 'select 1' >/dev/null 2>&1 && break; sleep 0.1
  done
  mariadb --no-defaults -S "$BASE/mysql/mysqld.sock" -uroot -e \
    "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm'; GRANT ALL ON *.* TO 'slurm'@'127.0.0.1';"
  cat > "$BASE/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$SOCK
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$((PORT + 1))
SlurmUser=root
LogFile=$BASE/log/slurmdbd.log
PidFile=$BASE/pids/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$((PORT + 2))
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$BASE/etc/slurmdbd.conf"       # slurmdbd refuses a group/world-readable config
  # slurmdbd reads slurmdbd.conf from the directory of $SLURM_CONF
  setsid slurmdbd -D </dev/null >>"$BASE/log/slurmdbd.out" 2>&1 &
  echo $! > "$BASE/pids/slurmdbd.fg.pid"
  for _ in $(seq 50); do timeout 3 sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.1; done
  timeout 10 sacctmgr -i add cluster lairtest >/dev/null
fi

# ---- daemons: foreground mode (-D) in the background; PIDs recorded for slurm_down.sh
setsid slurmctld -D -i -f "$SLURM_CONF" >>"$BASE/log/slurmctld.out" 2>&1 < /dev/null &
echo $! > "$BASE/pids/slurmctld.fg.pid"
set -- $NETNS
for i in $(seq 1 "$NODES"); do
  mkdir -p "$BASE/spool/n$i"
  ns=()
  if [ -n "$NETNS" ]; then spec=${!i}; ns=(nsenter "--net=${spec%%=*}"); fi
  setsid "${ns[@]}" slurmd -D -N "n$i" -f "$SLURM_CONF" >>"$BASE/log/slurmd-n$i.out" 2>&1 < /dev/null &
  echo $! > "$BASE/pids/slurmd-n$i.fg.pid"
done

# ---- wait until all nodes are idle
for _ in $(seq 300); do
  n=$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)
  [ "$n" -ge "$NODES" ] && { echo "export SLURM_CONF=$SLURM_CONF"; exit 0; }
  sleep 0.1
done
echo "cluster did not become idle; logs in $BASE/log" >&2; sinfo -N -l >&2 || true; exit 1
