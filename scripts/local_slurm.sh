#!/usr/bin/env bash
# local_slurm.sh: a real Slurm "cluster" on this one host, for chapter 07, its tests and a laptop.
#
#   scripts/local_slurm.sh start     # munged + slurmctld + 2 slurmd "nodes" on 127.0.0.1 (idempotent)
#   scripts/local_slurm.sh stop      # cancels its jobs, stops the daemons it started, by pid file
#   scripts/local_slurm.sh status    # exit 0 when up and every node usable
#   eval "$(scripts/local_slurm.sh env)"   # SLURM_CONF (+ the cluster's directory) for the clients
#
# Everything lives under one directory ($HPCLAB_SLURM_DIR, default /tmp/hpclab-slurm): the
# configuration, a private munge key and socket, state, spool, logs and pid files. Nothing under
# /etc or /run is touched, so a site's own Slurm or munge on the same machine is left alone:
# - munged runs with its own key, socket, pid and seed files (slurm.conf: AuthInfo=socket=...);
# - the ports are chosen at start (HPCLAB_SLURM_PORT, else the first free run of three ports from
#   a base derived from the directory), never Slurm's defaults 6817/6818;
# - the nodes are node1..nodeN (Slurm's "multiple slurmd" mode, Debian's build has it), every one
#   on 127.0.0.1 with its own port; jobs find a node's address with `scontrol show node`.
# The controller's settings are chosen for teaching and CI, and said openly in the chapter:
# a requeued job waits AuthInfo cred_expire seconds (Slurm's default 120 s; here
# $HPCLAB_SLURM_REQUEUE_DELAY, default 5), batch jobs start at once (batch_sched_delay=0), the
# scheduler runs every second (sched_interval=1, bf_interval=1; defaults 60 s and 30 s), and
# task/affinity binds a job to the CPUs it asked for (task/none would show it every core).
# sacct works without slurmdbd through jobcomp/filetxt (`sacct -c`).
#
# Knobs: HPCLAB_SLURM_DIR, HPCLAB_SLURM_NODES (2), HPCLAB_SLURM_PORT (first of nodes+1 ports),
# HPCLAB_SLURM_REQUEUE_DELAY (5), HPCLAB_SLURM_TASK_PLUGIN (task/affinity), HPCLAB_SLURM_TIMEOUT (30).
# The same directory layout serves a JupyterHub that spawns into this cluster (chapter 07's hub):
# it only needs SLURM_CONF from `env`. Must run as root: slurmd starts jobs as the submitting user.
set -euo pipefail

ROOT=${HPCLAB_SLURM_DIR:-/tmp/hpclab-slurm}
NODES=${HPCLAB_SLURM_NODES:-2}
REQUEUE_DELAY=${HPCLAB_SLURM_REQUEUE_DELAY:-5}
TASK_PLUGIN=${HPCLAB_SLURM_TASK_PLUGIN:-task/affinity}
TIMEOUT=${HPCLAB_SLURM_TIMEOUT:-30}
CLUSTER=hpclab
CONF=$ROOT/etc/slurm.conf
RUN=$ROOT/run
LOG=$ROOT/log
MUNGE=$ROOT/munge
SOCKET=$MUNGE/munge.socket
export SLURM_CONF=$CONF

say() { echo "[local-slurm] $*" >&2; }
die() {
  say "$*"
  exit 1
}

alive() { # a pid that exists and is not a zombie
  [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null
}
pid_of() { [ -s "$1" ] && tr -dc '0-9' <"$1" || true; }

stop_pid() { # stop one daemon we started (its pid file), TERM then KILL, and wait for it
  local file=$1 pid
  pid=$(pid_of "$file")
  if alive "$pid"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then kill -9 "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$file"
}

node_names() { for i in $(seq 1 "$NODES"); do echo "node$i"; done; }

port_busy() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }

choose_ports() { # first of NODES+1 consecutive free ports (controller, then one per node)
  local base
  if [ -n "${HPCLAB_SLURM_PORT:-}" ]; then
    base=$HPCLAB_SLURM_PORT
  else
    base=$((20000 + $(printf %s "$ROOT" | cksum | cut -d' ' -f1) % 20000))
  fi
  local p=$base
  while :; do
    local ok=1 i
    for i in $(seq 0 "$NODES"); do
      if port_busy $((p + i)); then ok=0; fi
      case $((p + i)) in 6817 | 6818 | 6819) ok=0 ;; esac
    done
    if [ "$ok" = 1 ]; then
      echo "$p"
      return
    fi
    [ -n "${HPCLAB_SLURM_PORT:-}" ] && die "ports $base..$((base + NODES)) are in use (HPCLAB_SLURM_PORT)"
    p=$((p + NODES + 1))
    [ "$p" -lt 60000 ] || die "no free ports found"
  done
}

start_munge() { # a private munged: own key, socket, pid, seed and log (no /etc, no /run)
  mkdir -p "$MUNGE"
  if [ ! -s "$MUNGE/munge.key" ]; then mungekey --create --keyfile="$MUNGE/munge.key" --force; fi
  chown -R munge:munge "$MUNGE"
  chmod 0700 "$MUNGE"
  chmod 0400 "$MUNGE/munge.key"
  # clients (any user) must reach the socket: the directory is traversable, not listable
  chmod 0711 "$MUNGE"
  rm -f "$SOCKET" "$SOCKET.lock"
  runuser -u munge -- /usr/sbin/munged --socket="$SOCKET" --key-file="$MUNGE/munge.key" \
    --pid-file="$MUNGE/munged.pid" --seed-file="$MUNGE/munged.seed" --log-file="$MUNGE/munged.log"
  cp "$MUNGE/munged.pid" "$RUN/munged.pid"
  for _ in $(seq 1 50); do
    if munge -S "$SOCKET" -n 2>/dev/null | unmunge -S "$SOCKET" >/dev/null 2>&1; then return; fi
    sleep 0.1
  done
  die "munged did not answer on $SOCKET (see $MUNGE/munged.log)"
}

write_conf() {
  local port=$1 hw cpus sockets cores threads mem
  hw=$(slurmd -C | head -1)
  field() { sed -n "s/.*$1=\([0-9]*\).*/\1/p" <<<"$hw"; }
  cpus=$(field CPUs)
  sockets=$(field SocketsPerBoard)
  cores=$(field CoresPerSocket)
  threads=$(field ThreadsPerCore)
  # below what slurmd detects, or the node drains ("Low RealMemory")
  mem=$(($(field RealMemory) * 8 / 10 / NODES))
  {
    echo "# written by scripts/local_slurm.sh; every node is this host"
    echo "ClusterName=$CLUSTER"
    echo "SlurmctldHost=localhost(127.0.0.1)"
    echo "SlurmctldPort=$port"
    # every daemon binds the address its host resolves to (127.0.0.1 here), never 0.0.0.0: other
    # users of a shared machine cannot reach this cluster (slurm.conf(5), CommunicationParameters)
    echo "CommunicationParameters=NoInAddrAny,NoCtldInAddrAny"
    echo "SlurmUser=slurm"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=$SOCKET,cred_expire=$REQUEUE_DELAY"
    echo "StateSaveLocation=$ROOT/state"
    echo "SlurmdSpoolDir=$ROOT/spool/%n"
    echo "SlurmctldPidFile=$RUN/slurmctld.pid"
    echo "SlurmdPidFile=$RUN/slurmd-%n.pid"
    echo "SlurmctldLogFile=$LOG/slurmctld.log"
    echo "SlurmdLogFile=$LOG/slurmd-%n.log"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=$TASK_PLUGIN"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core_Memory"
    # scheduler passes every second (defaults: 60 s main, 30 s backfill): a requeued job starts
    # as soon as its cred_expire wait is over, not at the next pass
    echo "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,sched_interval=1,bf_interval=1"
    echo "MpiDefault=none"
    echo "MailProg=/bin/true"
    echo "AccountingStorageType=accounting_storage/none"
    # job accounting gathering: slurmstepd samples each step's processes (CPU time, RSS) every
    # second, which sstat reads while the job runs; no database (slurmdbd + MariaDB would cost CI
    # start-up time and disk): after the job, sacct -c knows its state and times, not its usage
    echo "JobAcctGatherType=jobacct_gather/linux"
    echo "JobAcctGatherFrequency=task=1"
    echo "JobCompType=jobcomp/filetxt"
    echo "JobCompLoc=$LOG/jobcomp.txt"
    echo "ReturnToService=2"
    echo "MinJobAge=60"
    echo "KillWait=5"
    # a node whose slurmd stops answering is DOWN after 5 s and its jobs end NODE_FAIL (the
    # default, 300 s, leaves a finished job's caller waiting five minutes for nothing)
    echo "SlurmdTimeout=5"
    echo "InactiveLimit=0"
    echo "Waittime=0"
    echo "DefMemPerCPU=512"
    echo "Epilog=$ROOT/etc/epilog.sh"
    echo "TaskProlog=$ROOT/etc/task_prolog.sh"
    echo "NodeName=DEFAULT CPUs=$cpus SocketsPerBoard=$sockets CoresPerSocket=$cores ThreadsPerCore=$threads RealMemory=$mem State=UNKNOWN"
    local i=1 n
    for n in $(node_names); do
      echo "NodeName=$n NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((port + i))"
      i=$((i + 1))
    done
    echo "PartitionName=debug Nodes=node[1-$NODES] Default=YES MaxTime=30:00 State=UP"
  } >"$CONF.new"
  mv "$CONF.new" "$CONF"
  chmod 0644 "$CONF"
  # A job's node-local scratch ($SLURM_TMPDIR, set by the task prolog as sites do) is private
  # to this cluster and this user, and ends with the job: named by the job id alone, two local
  # clusters' cleanups (two students, two test workers) would delete each other's data.
  mkdir -p "$ROOT/scratch"
  chmod 1777 "$ROOT/scratch"
  local scratch="$ROOT/scratch/\$SLURM_JOB_UID/\$SLURM_JOB_ID"
  printf '#!/bin/sh\nd="%s"\nmkdir -p -m 0700 "$d" && echo "export SLURM_TMPDIR=$d"\n' \
    "$scratch" >"$ROOT/etc/task_prolog.sh"
  printf '#!/bin/sh\nrm -rf "%s"\n' "$scratch" >"$ROOT/etc/epilog.sh"
  chmod 0755 "$ROOT/etc/epilog.sh" "$ROOT/etc/task_prolog.sh"
}

healthy() {
  [ -s "$CONF" ] || return 1
  # a cluster started by an older version of this script (no accounting gathering) is restarted
  grep -q '^JobAcctGatherType=jobacct_gather/linux$' "$CONF" || return 1
  alive "$(pid_of "$RUN/munged.pid")" || return 1
  alive "$(pid_of "$RUN/slurmctld.pid")" || return 1
  local n
  for n in $(node_names); do alive "$(pid_of "$RUN/slurmd-$n.pid")" || return 1; done
  scontrol ping 2>/dev/null | grep -q "is UP" || return 1
  ! sinfo -h -N -o '%T' 2>/dev/null | grep -vqE '^(idle|mixed|allocated|completing)$'
}

wait_for() { # wait_for WHAT COMMAND...: poll every 0.2 s up to $TIMEOUT seconds
  local what=$1 t=0
  shift
  until "$@"; do
    sleep 0.2
    t=$((t + 1))
    [ "$t" -lt $((TIMEOUT * 5)) ] || die "$what did not happen in ${TIMEOUT}s (logs: $LOG)"
  done
}

nodes_idle() { [ "$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)" -ge "$NODES" ]; }

do_start() {
  [ "$(id -u)" = 0 ] || die "must run as root (slurmd starts jobs as the submitting user)"
  for b in munged mungekey slurmctld slurmd sbatch; do
    command -v "$b" >/dev/null || die "$b is missing: apt-get install slurmctld slurmd slurm-client munge"
  done
  if healthy; then
    say "already up: $(sinfo -h -o '%D nodes %t' | tr '\n' ' ')(SLURM_CONF=$CONF)"
    return 0
  fi
  do_stop quiet
  mkdir -p "$ROOT"/{etc,state,spool,log,run}
  chmod 0755 "$ROOT"
  chown slurm:slurm "$ROOT/state" "$LOG" "$RUN"
  local port
  port=$(choose_ports)
  write_conf "$port"
  start_munge
  # sacct -c opens the completion file read-write: every user of the cluster needs write access
  touch "$LOG/jobcomp.txt"
  chown slurm:slurm "$LOG/jobcomp.txt"
  chmod 0666 "$LOG/jobcomp.txt"
  slurmctld -c -f "$CONF" || die "slurmctld failed (see $LOG/slurmctld.log)"
  wait_for "slurmctld answering" bash -c 'scontrol ping 2>/dev/null | grep -q "is UP"'
  local n
  for n in $(node_names); do slurmd -N "$n" -f "$CONF" || die "slurmd $n failed (see $LOG/slurmd-$n.log)"; done
  wait_for "every node idle" nodes_idle
  say "up: $NODES nodes, controller port $port, SLURM_CONF=$CONF"
}

stop_jobs() { # cancel this cluster's jobs, then end any job step left from a node of ours
  if [ -s "$CONF" ] && alive "$(pid_of "$RUN/slurmctld.pid")"; then
    scancel --full --quiet $(squeue -h -o %i 2>/dev/null) 2>/dev/null || true
    for _ in $(seq 1 50); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.2; done
  fi
  # a slurmstepd of one of our nodes holds a socket in our spool directory: only those are ours
  local proc fd comm
  for proc in /proc/[0-9]*; do
    comm=
    read -r comm <"$proc/comm" 2>/dev/null || true
    [ "$comm" = slurmstepd ] || continue
    for fd in "$proc"/fd/*; do
      case $(readlink "$fd" 2>/dev/null || true) in
      "$ROOT/spool/"*)
        kill -9 "${proc#/proc/}" 2>/dev/null || true
        break
        ;;
      esac
    done
  done
}

do_stop() {
  [ -d "$RUN" ] || return 0
  stop_jobs
  local f
  for f in "$RUN"/slurmd-*.pid; do [ -e "$f" ] && stop_pid "$f"; done
  stop_pid "$RUN/slurmctld.pid"
  stop_pid "$RUN/munged.pid"
  rm -f "$SOCKET" "$SOCKET.lock"
  [ "${1:-}" = quiet ] || say "stopped (nothing of it runs; files stay in $ROOT)"
}

case "${1:-}" in
start) do_start ;;
stop) do_stop ;;
restart)
  do_stop
  do_start
  ;;
status)
  if healthy; then sinfo -N; else
    say "not running (start: scripts/local_slurm.sh start)"
    exit 1
  fi
  ;;
env)
  echo "export SLURM_CONF=$CONF"
  echo "export HPCLAB_SLURM_DIR=$ROOT"
  ;;
*) die "usage: $0 start|stop|restart|status|env" ;;
esac
