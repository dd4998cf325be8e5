#!/usr/bin/env bash
# A real single-node SLURM cluster on this machine (Debian's Slurm), for CI and local tests.
#
#   eval "$(scripts/slurm_cluster.sh up)"   # install if missing, configure, start; prints export lines
#   scripts/slurm_cluster.sh status
#   scripts/slurm_cluster.sh down           # stop the daemons (state stays for the next `up`)
#
# Idempotent. Needs root (package install, munge). No systemd: daemons are started directly and
# stopped by their pid files. Accounting is not run; submitit's `sacct` calls are answered by a
# small shim from `scontrol show job` (finished jobs are kept for an hour, MinJobAge=3600).
set -euo pipefail

DIR=${SKILLROUTER_SLURM_DIR:-/tmp/skillrouter-slurm}
CONF=$DIR/slurm.conf

log() { echo "slurm_cluster: $*" >&2; }

install_packages() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null && return
  log "installing slurmctld slurmd slurm-client munge"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >&2
}

start_munge() {
  mkdir -p /run/munge /etc/munge /var/lib/munge /var/log/munge
  [ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key >&2
  chown -R munge:munge /run/munge /etc/munge /var/lib/munge /var/log/munge
  chmod 0400 /etc/munge/munge.key
  if ! munge -n >/dev/null 2>&1; then
    runuser -u munge -- /usr/sbin/munged --force >&2
    for _ in $(seq 50); do munge -n >/dev/null 2>&1 && break; sleep 0.1; done
  fi
}

write_config() {
  mkdir -p "$DIR"/{state,spool,log,bin}
  local node
  node=$(slurmd -C | head -1 | sed -E 's/ (Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=[0-9]+//g')
  local name
  name=$(sed -E 's/^NodeName=([^ ]+).*/\1/' <<<"$node")
  cat >"$CONF" <<EOF
ClusterName=skillrouter
SlurmctldHost=$name(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherParams=OverMemoryKill
JobAcctGatherFrequency=task=1
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=4096
EnforcePartLimits=ALL
MinJobAge=3600
KillWait=2
ReturnToService=2
SchedulerType=sched/backfill
MpiDefault=none
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=$name Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
  cat >"$DIR/bin/sacct" <<'EOF'
#!/usr/bin/env python3
"""sacct shim for clusters without accounting: answers `sacct -o JobID,State,NodeList --parsable2 -j ID...`
(what submitit asks) from `scontrol show job -o`."""
import subprocess, sys
args = sys.argv[1:]
wanted = {args[i + 1] for i, a in enumerate(args) if a == "-j" and i + 1 < len(args)}
out = subprocess.run(["scontrol", "show", "job", "-o"], capture_output=True, text=True).stdout
print("JobID|State|NodeList")
for line in out.splitlines():
    f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
    if "JobId" not in f:
        continue
    array, task = f.get("ArrayJobId"), f.get("ArrayTaskId")
    base = array or f["JobId"]
    if wanted and base not in wanted and f["JobId"] not in wanted:
        continue
    job = f"{array}_{task if '-' not in task and ',' not in task else '[' + task.split('%')[0] + ']'}" if array and task else f["JobId"]
    print(f"{job}|{f.get('JobState', 'UNKNOWN')}|{f.get('NodeList', '')}")
EOF
  chmod +x "$DIR/bin/sacct"
}

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

up() {
  install_packages
  start_munge
  write_config
  export SLURM_CONF=$CONF
  running "$DIR/slurmctld.pid" || slurmctld -f "$CONF" >&2
  running "$DIR/slurmd.pid" || slurmd -f "$CONF" >&2
  # a node restarted under old state may still be `completing` a step of a previous job: it is up
  local ready='^(idle|mixed|allocated|completing)'
  for _ in $(seq 200); do
    if sinfo -h -o %T 2>/dev/null | grep -qE "$ready"; then break; fi
    scontrol update nodename=ALL state=resume >/dev/null 2>&1 || true
    sleep 0.3
  done
  sinfo -h -o %T | grep -qE "$ready" || { log "node did not come up; see $DIR/log"; exit 1; }
  log "up: $(sinfo -h -o '%P %D %T %c cpus %m MB')"
  log "launch grids here with hydra/launcher=slurm_dev, i.e. hydra/launcher=slurm hydra.launcher.partition=debug" \
      "hydra.launcher.cpus_per_task=1 hydra.launcher.gpus_per_node=null hydra.launcher.mem_gb=null (no GPUs on this node)"
  echo "export SLURM_CONF=$CONF"
  echo "export PATH=$DIR/bin:\$PATH"
}

stop_pid() {
  local pidfile=$1
  running "$pidfile" || return 0
  kill "$(cat "$pidfile")" 2>/dev/null || true
  for _ in $(seq 50); do running "$pidfile" || return 0; sleep 0.1; done
  kill -9 "$(cat "$pidfile")" 2>/dev/null || true
}

down() {
  stop_pid "$DIR/slurmd.pid"
  stop_pid "$DIR/slurmctld.pid"
  log "down"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) SLURM_CONF=$CONF sinfo && SLURM_CONF=$CONF squeue ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
