#!/usr/bin/env bash
# A throwaway one-node Slurm cluster on 127.0.0.1, for testing the sbatch scripts:
#
#   scripts/slurm_test_cluster.sh [--workdir DIR] [--cpus N] [--gpus N] -- COMMAND [ARGS...]
#
# Starts munged, slurmctld and slurmd from Debian's packages (munge, slurmctld, slurmd,
# slurm-client; installed with apt-get when missing and running as root), waits until
# the node is idle, runs COMMAND with SLURM_CONF pointing at this cluster (so sbatch,
# srun, squeue and scontrol talk to it), then cancels its jobs and stops every daemon
# it started, by PID, whatever happened. Exits with COMMAND's status; 77 when Slurm
# cannot be run here (the reason is printed); 1 when the cluster failed to start.
#
# Each run has its own ports, cluster name, state and spool directories, so leftovers of
# an earlier run cannot interfere. No systemd is needed: the daemons run in the
# foreground, each in a session of its own so that a signal meant for the caller's
# process group (e.g. from `timeout`) reaches this script, which then shuts the cluster
# down in order, rather than killing slurmctld before its jobs are cancelled. Should
# this script itself be killed outright, a watchdog (this script with --watchdog) does
# the same shutdown. The node advertises --cpus CPUs (default 4, whatever the machine
# has; slurmd is told to trust the config) and --gpus GPUs (default 0) backed by
# stand-in device files: enough to schedule the GPU sbatch scripts, whose jobs then run
# whatever device the config names.
#
# WORKDIR (default: a new directory under /tmp, removed at the end) holds slurm.conf,
# the daemon logs and the state (WORKDIR/slurm-cluster); the logs are printed when
# startup fails.
set -uo pipefail
export PATH=$PATH:/usr/sbin:/sbin

skip() { echo "slurm_test_cluster: SKIP: $*" >&2; exit 77; }
die() { echo "slurm_test_cluster: $*" >&2; exit 1; }

# stop_cluster STATE MUNGE_DIR: stop the command if still running, cancel the cluster's
# jobs, stop its daemons (PIDs in STATE/daemon.pids, started last stopped first) and
# remove munged's directory. Bounded to a few seconds so it finishes within the grace
# period of a `timeout -k 5`.
stop_cluster() {
  local state=$1 munge_dir=$2
  [ -e "$state/stopped" ] && return
  touch "$state/stopped"
  # The command, when this runs as the watchdog after the script was killed.
  [ -f "$state/command.pid" ] && kill -TERM "$(cat "$state/command.pid")" 2>/dev/null
  local pids=()
  [ -f "$state/daemon.pids" ] && mapfile -t pids <"$state/daemon.pids"
  if [ ${#pids[@]} -ge 2 ] && kill -0 "${pids[1]}" 2>/dev/null; then
    # slurmctld is up: cancel what still runs so its slurmstepd and tasks end too.
    export SLURM_CONF=$state/slurm.conf
    if [ -n "$(timeout 2 squeue -h -o %i 2>/dev/null)" ]; then
      timeout 2 scancel --partition=test 2>/dev/null
      for _ in $(seq 15); do
        [ -z "$(timeout 1 squeue -h -o %i 2>/dev/null)" ] && break
        sleep 0.2
      done
    fi
  fi
  local i pid
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 10); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
  done
  rm -rf "$munge_dir"
}

# --watchdog PID STATE MUNGE_DIR [WORKDIR_TO_REMOVE]: waits for PID to end, then
# stops the cluster unless that already happened.
if [ "${1:-}" = "--watchdog" ]; then
  trap '' TERM INT HUP
  while kill -0 "$2" 2>/dev/null; do sleep 0.5; done
  stop_cluster "$3" "$4"
  [ -n "${5:-}" ] && rm -rf "$5"
  exit 0
fi

usage() { sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
WORKDIR="" CPUS=4 GPUS=0
while [ $# -gt 0 ]; do
  case "$1" in
    --workdir) WORKDIR=$2; shift 2 ;;
    --cpus) CPUS=$2; shift 2 ;;
    --gpus) GPUS=$2; shift 2 ;;
    --) shift; break ;;
    *) usage ;;
  esac
done
[ $# -gt 0 ] || usage

# --- Slurm and munge: install when missing -----------------------------------------------
PACKAGES=(munge slurmctld slurmd slurm-client)
have_all() {
  local b
  for b in munged mungekey slurmctld slurmd sbatch srun squeue scancel scontrol setpriv setsid; do
    command -v "$b" >/dev/null 2>&1 || return 1
  done
}
if ! have_all; then
  [ "$(id -u)" -eq 0 ] || skip "Slurm/munge not installed, and not root to install ${PACKAGES[*]}"
  command -v apt-get >/dev/null || skip "Slurm/munge not installed and no apt-get"
  echo "slurm_test_cluster: installing ${PACKAGES[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  if ! timeout 600 apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >/dev/null 2>&1; then
    timeout 300 apt-get update -q >/dev/null 2>&1
    timeout 600 apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >/dev/null 2>&1 ||
      skip "apt-get install ${PACKAGES[*]} failed"
  fi
  have_all || skip "Slurm/munge still missing after apt-get install"
fi
[ "$(id -u)" -eq 0 ] || skip "slurmd must run as root to start jobs as any user"
id munge >/dev/null 2>&1 || skip "no 'munge' user (the munge package creates it)"

# --- Directories, ports, config -------------------------------------------------------------
OWN_WORKDIR=""
if [ -z "$WORKDIR" ]; then WORKDIR=$(mktemp -d /tmp/pptrain-slurm-XXXXXX); OWN_WORKDIR=$WORKDIR; fi
WORKDIR=$(cd "$WORKDIR" && pwd) || die "no workdir $WORKDIR"
STATE=$WORKDIR/slurm-cluster
rm -rf "$STATE"
mkdir -p "$STATE/ctld" "$STATE/spool" "$STATE/tmp" || die "cannot create $STATE"
# munged refuses key files and sockets in directories other users can write, and must
# reach them as the munge user, so it gets a directory of its own (x for all: clients
# connect to the socket in it).
MUNGE_DIR=$(mktemp -d /tmp/pptrain-munge-XXXXXX)
chown munge:munge "$MUNGE_DIR" && chmod 0711 "$MUNGE_DIR"
MUNGE_SOCKET=$MUNGE_DIR/munge.socket
: >"$STATE/daemon.pids"

CMD_PID=""
WATCHDOG_PID=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  [ -n "$CMD_PID" ] && kill -TERM "$CMD_PID" 2>/dev/null
  stop_cluster "$STATE" "$MUNGE_DIR"
  [ -n "$WATCHDOG_PID" ] && kill -KILL "$WATCHDOG_PID" 2>/dev/null  # it ignores TERM
  [ -n "$OWN_WORKDIR" ] && rm -rf "$OWN_WORKDIR"
  exit $rc
}
trap cleanup EXIT
trap 'exit 143' TERM INT HUP
setsid bash "$0" --watchdog $$ "$STATE" "$MUNGE_DIR" $OWN_WORKDIR </dev/null >/dev/null 2>&1 &
WATCHDOG_PID=$!
disown "$WATCHDOG_PID"  # no job-control notice when cleanup kills it

# Ports below the kernel's ephemeral range: a port in it can be the local end of any
# outgoing connection (an earlier cluster's sockets in TIME_WAIT, MPI's TCP), and then
# slurmctld's bind fails with "Address already in use" although nothing listens there.
# Free: no listener answers, and no socket of any state uses it as its local port.
EPHEMERAL_LOW=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
[ "$EPHEMERAL_LOW" -gt 12002 ] 2>/dev/null || EPHEMERAL_LOW=32768
port_free() {
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null || return 1
  ! command -v ss >/dev/null || [ -z "$(ss -Htan "( sport = :$1 )" 2>/dev/null)" ]
}
for _ in $(seq 20); do
  CTLD_PORT=$((12000 + (RANDOM % ((EPHEMERAL_LOW - 12002) / 2)) * 2))
  SLURMD_PORT=$((CTLD_PORT + 1))
  port_free "$CTLD_PORT" && port_free "$SLURMD_PORT" && break
done
HOST=$(hostname -s)
CONF=$STATE/slurm.conf
GRES_LINE=""; [ "$GPUS" -gt 0 ] && GRES_LINE="Gres=gpu:$GPUS"
cat >"$CONF" <<EOF
# Generated by scripts/slurm_test_cluster.sh: one node on loopback, no cgroups, no
# accounting; everything under $STATE.
ClusterName=pptest$CTLD_PORT
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
# Per-cluster job ids and temporary directory: PMIx names its per-step directories by
# job id under TmpFS, which would collide between two test clusters on one machine.
TmpFS=$STATE/tmp
FirstJobId=$((CTLD_PORT * 10))
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# Schedule a submitted batch job at once (the default waits up to 3 s).
SchedulerType=sched/builtin
SchedulerParameters=batch_sched_delay=0
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
# A cancelled job gets SIGKILL 2 s after SIGTERM (default 30 s).
KillWait=2
SlurmdParameters=config_overrides
GresTypes=gpu
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=1000 $GRES_LINE State=UNKNOWN
PartitionName=test Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
if [ "$GPUS" -gt 0 ]; then
  # A GPU GRES must name device files; stand-ins with /dev/null's numbers will do, as
  # nothing opens them (task/none: no device cgroup).
  for ((i = 0; i < GPUS; i++)); do
    mknod "$STATE/gpu$i" c 1 3 2>/dev/null || skip "cannot mknod GPU stand-ins in $STATE"
  done
  printf 'AutoDetect=off\nNodeName=%s Name=gpu File=%s/gpu[0-%d]\n' "$HOST" "$STATE" $((GPUS - 1)) \
    >"$STATE/gres.conf"
fi
export SLURM_CONF=$CONF

show_logs() {
  local f
  for f in "$MUNGE_DIR/munged.log" "$STATE/slurmctld.log" "$STATE/slurmd.log"; do
    [ -f "$f" ] && { echo "--- $f"; tail -n 20 "$f"; }
  done >&2
}

# --- Start the daemons -------------------------------------------------------------------------
# start NAME COMMAND...: runs COMMAND in a session of its own (setsid and setpriv exec,
# so $! is the daemon's own PID) and records the PID.
start() {
  local name=$1; shift
  setsid "$@" </dev/null >"$STATE/$name.stdout" 2>&1 &
  echo $! >>"$STATE/daemon.pids"
}
mungekey --create --keyfile="$MUNGE_DIR/munge.key" >/dev/null 2>&1 || die "mungekey failed"
chown munge:munge "$MUNGE_DIR/munge.key" && chmod 0600 "$MUNGE_DIR/munge.key"
start munged setpriv --reuid=munge --regid=munge --init-groups \
  munged -F --socket="$MUNGE_SOCKET" --key-file="$MUNGE_DIR/munge.key" \
  --pid-file="$MUNGE_DIR/munged.pid" --log-file="$MUNGE_DIR/munged.log" \
  --seed-file="$MUNGE_DIR/munged.seed"
for _ in $(seq 50); do [ -S "$MUNGE_SOCKET" ] && break; sleep 0.1; done
[ -S "$MUNGE_SOCKET" ] || { show_logs; die "munged did not start"; }
start slurmctld slurmctld -D -f "$CONF"
start slurmd slurmd -D -f "$CONF"

# Ready when the node reports idle.
ready=0
for _ in $(seq 150); do
  while read -r pid; do
    kill -0 "$pid" 2>/dev/null || { show_logs; die "a daemon exited during startup"; }
  done <"$STATE/daemon.pids"
  if timeout 5 scontrol show node "$HOST" 2>/dev/null | grep -q 'State=IDLE'; then ready=1; break; fi
  sleep 0.2
done
[ $ready -eq 1 ] || { show_logs; timeout 5 scontrol show node "$HOST" >&2; die "node $HOST not idle after 30 s"; }
echo "slurm_test_cluster: node $HOST idle (slurmctld :$CTLD_PORT, slurmd :$SLURMD_PORT," \
     "pids $(tr '\n' ' ' <"$STATE/daemon.pids"))" >&2

# --- Run the command -----------------------------------------------------------------------------
# In the background, so a TERM for this script runs the cleanup at once.
"$@" &
CMD_PID=$!
echo "$CMD_PID" >"$STATE/command.pid"
wait "$CMD_PID"
rc=$?
CMD_PID=""
rm -f "$STATE/command.pid"
exit $rc
