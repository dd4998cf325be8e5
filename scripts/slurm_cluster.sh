#!/usr/bin/env bash
# A real single-node SLURM cluster on this machine (Debian's Slurm), for CI and local tests.
#
#   eval "$(scripts/slurm_cluster.sh up)"   # install if missing, configure, start; prints export lines
#   scripts/slurm_cluster.sh status
#   scripts/slurm_cluster.sh down           # stop the daemons
#
# The node declares SKILLROUTER_SLURM_GPUS counted GPUs (default 4): a GRES whose device files are
# placeholders, which SLURM schedules and accounts (so tests see which jobs hold a GPU) and nothing more. With
# SKILLROUTER_SLURM_CPUS=N it declares N CPUs whatever the hardware has (SlurmdParameters=config_overrides),
# i.e. N job slots: a cluster with a free GPU per cell, for benchmarks (a job waiting on a lock uses no CPU),
# with N x 4 GB of declared memory, or SKILLROUTER_SLURM_MEM_MB. `up` with other settings than the running
# cluster's restarts it.
#
# A cold `up` (no controller running) starts with an empty queue: the jobs of a cluster whose daemons died
# (a machine restart, a killed CI run) have no launcher waiting on them any more, and left in the saved state
# they would run again and hold the node's slots and GPUs, so that the next grid's jobs pend behind them.
#
# Idempotent. Needs root (package install, munge). No systemd: daemons are started directly and
# stopped by their pid files. Accounting is not run; submitit's `sacct` calls are answered by a
# small shim from `scontrol show job` (finished jobs are kept for an hour, MinJobAge=3600).
set -euo pipefail

DIR=${SKILLROUTER_SLURM_DIR:-/tmp/skillrouter-slurm}
CONF=$DIR/slurm.conf
GPUS=${SKILLROUTER_SLURM_GPUS:-4}
CPUS=${SKILLROUTER_SLURM_CPUS:-}
MEM_PER_CPU=4096
MEM_MB=${SKILLROUTER_SLURM_MEM_MB:-}

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
  local node overrides=""
  node=$(slurmd -C | head -1 | sed -E 's/ (Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=[0-9]+//g')
  if [ -n "$CPUS" ]; then  # declared slots, not the hardware's; memory to match the per-CPU default
    node=$(sed -E "s/ CPUs=[0-9]+/ CPUs=$CPUS/; s/ RealMemory=[0-9]+/ RealMemory=${MEM_MB:-$((CPUS * MEM_PER_CPU))}/" <<<"$node")
    overrides="SlurmdParameters=config_overrides"
  fi
  local name
  name=$(sed -E 's/^NodeName=([^ ]+).*/\1/' <<<"$node")
  # Slurm drops a GPU without a device file, so each counted GPU gets a placeholder one (no driver behind
  # it; with TaskPlugin=task/none nothing binds it): the GPUs are scheduled and accounted, nothing more.
  mkdir -p "$DIR/dev"
  for i in $(seq 0 $((GPUS - 1))); do touch "$DIR/dev/gpu$i"; done
  echo "NodeName=$name Name=gpu Count=$GPUS File=$DIR/dev/gpu[0-$((GPUS - 1))]" >"$DIR/gres.conf.new"
  cat >"$CONF.new" <<EOF
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
DefMemPerCPU=$MEM_PER_CPU
GresTypes=gpu
$overrides
EnforcePartLimits=ALL
MinJobAge=3600
KillWait=2
ReturnToService=2
SchedulerType=sched/backfill
MpiDefault=none
$node Gres=gpu:$GPUS NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=$name Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
  changed=0
  for f in "$CONF" "$DIR/gres.conf"; do
    cmp -s "$f.new" "$f" || changed=1
    mv "$f.new" "$f"
  done
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

# A pid file's process is running and is that daemon: after a machine restart an old pid can belong to any process.
running() {
  [ -f "$1" ] || return 1
  local pid
  pid=$(cat "$1")
  kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$(basename "$1" .pid)" ]
}

up() {
  install_packages
  start_munge
  write_config
  export SLURM_CONF=$CONF
  if [ "$changed" = 1 ] && { running "$DIR/slurmctld.pid" || running "$DIR/slurmd.pid"; }; then
    log "configuration changed: restarting"
    down
  fi
  running "$DIR/slurmctld.pid" || slurmctld -c -f "$CONF" >&2  # -c: a cold start discards the saved jobs
  running "$DIR/slurmd.pid" || slurmd -f "$CONF" >&2
  # a node restarted under old state may still be `completing` a step of a previous job: it is up
  local ready='^(idle|mixed|allocated|completing)'
  for _ in $(seq 200); do
    if sinfo -h -o %T 2>/dev/null | grep -qE "$ready"; then break; fi
    scontrol update nodename=ALL state=resume >/dev/null 2>&1 || true
    sleep 0.3
  done
  sinfo -h -o %T | grep -qE "$ready" || { log "node did not come up; see $DIR/log"; exit 1; }
  log "up: $(sinfo -h -o '%P %D %T %c cpus %m MB %G')"
  log "launch grids here with hydra/launcher=slurm_dev (1 CPU and the per-CPU memory per job; GPU-class stages" \
      "ask for one of the node's $GPUS counted GPUs)"
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
