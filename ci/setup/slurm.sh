#!/usr/bin/env bash
# A one-node Slurm cluster on 127.0.0.1 for the batch tests: installs slurm-wlm and munge with
# apt-get when missing, writes a minimal config, starts munged, slurmctld and slurmd. Idempotent:
# running it again on a machine where the cluster is up changes nothing and exits 0.
set -euo pipefail

log() { echo "slurm.sh: $*"; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo -n "$@"; else return 1; fi; }

if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
  log "cluster already up: $(sinfo -h -o '%N %T %c CPUs')"
  exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  log "installing slurm-wlm and munge (apt-get)"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    slurm-wlm munge >/dev/null
fi

CONF_DIR=/etc/slurm
[ -d /etc/slurm-llnl ] && [ ! -d /etc/slurm ] && CONF_DIR=/etc/slurm-llnl
NODE=$(hostname -s)
CPUS=$(nproc)
MEMORY_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 512 ))
as_root mkdir -p "$CONF_DIR" /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /var/lib/munge /var/log/munge

# munge: a key, and the daemon run as its own user (it refuses world-writable or root-owned setups).
if [ ! -s /etc/munge/munge.key ]; then
  as_root mkdir -p /etc/munge
  as_root dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
if id munge >/dev/null 2>&1; then
  as_root chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
fi
as_root chmod 0700 /etc/munge; as_root chmod 0400 /etc/munge/munge.key; as_root chmod 0755 /run/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  log "starting munged"
  if id munge >/dev/null 2>&1; then as_root runuser -u munge -- munged; else as_root munged --force; fi
fi

WANTED=$(cat <<CONF
# Written by ci/setup/slurm.sh: a one-node cluster for the grader's tests.
ClusterName=kernelgrader
SlurmctldHost=${NODE}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MaxArraySize=10001
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
NodeName=${NODE} NodeAddr=127.0.0.1 CPUs=${CPUS} RealMemory=${MEMORY_MB} State=UNKNOWN
PartitionName=debug Nodes=${NODE} Default=YES MaxTime=INFINITE State=UP
CONF
)
if [ "$(cat "$CONF_DIR/slurm.conf" 2>/dev/null)" != "$WANTED" ]; then
  log "writing $CONF_DIR/slurm.conf"
  echo "$WANTED" | as_root tee "$CONF_DIR/slurm.conf" >/dev/null
  # A daemon started with the old config must restart to read the new one (stopped by its pid file).
  for pidfile in /run/slurmctld.pid /run/slurmd.pid; do
    [ -s "$pidfile" ] && as_root kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  sleep 2
fi

if ! pgrep -x slurmctld >/dev/null; then log "starting slurmctld"; as_root slurmctld; fi
if ! pgrep -x slurmd >/dev/null; then log "starting slurmd"; as_root slurmd; fi

for _ in $(seq 1 30); do
  if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
    log "cluster up: $(sinfo -h -o '%N %T %c CPUs')"
    exit 0
  fi
  sinfo -h -o %T 2>/dev/null | grep -qE 'down|drain' && as_root scontrol update NodeName="$NODE" State=RESUME 2>/dev/null || true
  sleep 1
done
log "the cluster did not come up; see /var/log/slurm/slurmctld.log and slurmd.log"
sinfo 2>&1 || true
tail -n 20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log 2>/dev/null || true
exit 1
