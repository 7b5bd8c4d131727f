#!/usr/bin/env bash
# Runs the sbatch scripts of slurm/ on a real, private Slurm: munged, slurmctld and slurmd
# started here on this host, with every file in a temporary directory, their own munge socket
# and non-default ports, so that a system Slurm or munge (if any) is neither used nor disturbed.
# It submits slurm/refit-node.sbatch (under mpirun and under srun) and slurm/refit-array.sbatch
# (two configs) with CPU-only jobs, waits for them with a deadline, checks that each COMPLETED with exit code 0:0 and that
# the HDF5 files they wrote hold the runs with slurm_job_id equal to the job id. Every daemon it
# started is stopped on exit. Exits 77 (skipped) when not root or when Slurm or munge is missing.
# Environment (set by CTest): REFIT, REFIT_SOURCE_DIR, OMPI_ALLOW_RUN_AS_ROOT*.
set -euo pipefail

skip() {
  echo "slurm_test: skipped: $*"
  exit 77
}
[ "$(id -u)" -eq 0 ] || skip "needs root to start munged, slurmctld and slurmd"
for c in munged slurmctld slurmd sbatch scontrol squeue sinfo h5dump h5ls setpriv timeout; do
  command -v "$c" >/dev/null 2>&1 || skip "$c is not installed (scripts/install-deps.sh installs slurm-wlm and munge)"
done
id munge >/dev/null 2>&1 || skip "there is no munge user (the munge package creates it)"
: "${REFIT:?REFIT must point at the refit binary}"
: "${REFIT_SOURCE_DIR:?REFIT_SOURCE_DIR must point at the source tree}"

# Every wait below is bounded; the whole test is meant to take well under CTest's TIMEOUT.
JOB_DEADLINE_S=${SLURM_TEST_JOB_DEADLINE_S:-240}
START=$SECONDS
log() { echo "slurm_test: [$((SECONDS - START))s] $*"; }

# The directory must be traversable by the munge user (munged runs as munge), and its own
# munge/ subdirectory private to munge, which munged checks before it starts.
TMP=$(mktemp -d /tmp/refit-slurm.XXXXXX)
chmod 755 "$TMP"
pids=()
jobs=""

# Stops what this test started: its jobs if any still run (scancel, up to 10 s), then the
# daemons, by pid: SIGTERM, up to 15 s to exit, then SIGKILL. The temporary directory goes only
# when everything passed; on failure its logs are kept.
cleanup() {
  local rc=$?
  set +e
  if [ -n "$jobs" ] && [ -n "$(timeout 10 squeue -h -j "$jobs" -o %i 2>/dev/null)" ]; then
    local ids
    IFS=, read -ra ids <<<"$jobs"
    timeout 10 scancel "${ids[@]}"
    for _ in $(seq 20); do
      [ -z "$(timeout 10 squeue -h -j "$jobs" -o %i 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 150); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "slurm_test: pid $pid did not stop on SIGTERM; killing it" >&2
      kill -KILL "$pid" 2>/dev/null
    fi
  done
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ]; then
    rm -rf "$TMP"
  else
    for f in "$TMP"/log/*.log "$TMP"/out/*.out; do
      [ -f "$f" ] && { echo "--- $f (last 30 lines)"; tail -n 30 "$f"; }
    done >&2
    echo "slurm_test: logs kept in $TMP" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
# A CTest timeout or ^C must clean up too: exiting from these traps runs the EXIT trap.
trap 'exit 143' TERM
trap 'exit 130' INT

fail() {
  echo "slurm_test: FAIL: $*" >&2
  exit 1
}

# Two free TCP ports from the private range, so a system Slurm (6817/6818) cannot clash.
free_port() {
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 20000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
  fail "no free TCP port found"
}
CTLD_PORT=$(free_port)
SLURMD_PORT=$(free_port)
[ "$CTLD_PORT" != "$SLURMD_PORT" ] || SLURMD_PORT=$((CTLD_PORT + 1))

mkdir -p "$TMP"/{munge,state,spool,log,out,results,configs}

# munge: a fresh key and a private socket. munged refuses to run as root; setpriv (unlike
# runuser) execs it as the munge user, so the pid recorded is munged's own.
# munged wants its key, pid, log and seed in a directory private to it, and the socket in one
# that everybody can traverse (like /run/munge).
dd if=/dev/urandom of="$TMP/munge/munge.key" bs=1024 count=1 status=none
mkdir -p "$TMP/munge-run"
chown -R munge:munge "$TMP/munge" "$TMP/munge-run"
chmod 700 "$TMP/munge"
chmod 755 "$TMP/munge-run"
chmod 400 "$TMP/munge/munge.key"
MUNGE_SOCKET=$TMP/munge-run/munge.socket
setpriv --reuid=munge --regid=munge --init-groups munged --foreground --socket="$MUNGE_SOCKET" \
  --key-file="$TMP/munge/munge.key" --pid-file="$TMP/munge/munged.pid" \
  --log-file="$TMP/munge/munged.log" --seed-file="$TMP/munge/munged.seed" \
  >"$TMP/log/munged.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  [ -S "$MUNGE_SOCKET" ] && break
  sleep 0.1
done
[ -S "$MUNGE_SOCKET" ] || fail "munged did not create its socket within 10 s"
log "munged is up (socket $MUNGE_SOCKET)"

# slurm.conf: one node, this host under its short name, with the CPUs and memory slurmd itself
# detects (a node that claims more than it has is drained). No cgroups: proctrack/linuxproc and
# task/none work in containers. SlurmUser=root keeps every file in $TMP owned by one user.
HOST=$(hostname -s)
NODE_HW=$(slurmd -C | head -n 1 | sed 's/^NodeName=[^ ]* //')
# Nothing of an enclosing Slurm job (when CTest itself runs under one) may reach these clients.
unset "${!SLURM_@}"
export SLURM_CONF=$TMP/slurm.conf
cat >"$SLURM_CONF" <<CONF
ClusterName=refittest
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$TMP/state
SlurmdSpoolDir=$TMP/spool
SlurmctldPidFile=$TMP/slurmctld.pid
SlurmdPidFile=$TMP/slurmd.pid
SlurmctldLogFile=$TMP/log/slurmctld.log
SlurmdLogFile=$TMP/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
MinJobAge=600
NodeName=$HOST NodeAddr=127.0.0.1 $NODE_HW State=UNKNOWN
PartitionName=test Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF

# -D: stay in the foreground so the pid recorded is the daemon's; -i: ignore stale state.
slurmctld -D -i -f "$SLURM_CONF" >"$TMP/log/slurmctld.stdout" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" >"$TMP/log/slurmd.stdout" 2>&1 &
pids+=($!)

# The node must be idle before anything is submitted.
state=""
for _ in $(seq 60); do
  state=$(timeout 10 sinfo -h -n "$HOST" -o %t 2>/dev/null || true)
  [ "$state" = idle ] && break
  sleep 0.5
done
[ "$state" = idle ] || fail "node $HOST is '$state', not idle, 30 s after slurmd started"
log "slurmctld (port $CTLD_PORT) and slurmd (port $SLURMD_PORT) are up; node $HOST idle"

# CPU-only jobs: the tiny model over the mpi transport, 4 ranks on whatever cores there are.
config() {
  cat >"$1" <<JSON
{"model": "tiny", "trainer": "$2", "rollout": "$3", "transport": "mpi", "mode": "grouped",
 "warmup": 1, "iters": 2, "verify": "full"}
JSON
}
config "$TMP/configs/a.json" "fsdp=2" "tp=2"
config "$TMP/configs/b.json" "fsdp=1,tp=2" "tp=2"
printf '%s\n' "$TMP/configs/a.json" "$TMP/configs/b.json" >"$TMP/configs/list"

# The jobs inherit this environment (sbatch exports it all): REFIT, OMPI_ALLOW_RUN_AS_ROOT*,
# SLURM_CONF, and OMPI_MCA_rmaps_base_oversubscribe=1. --ntasks=4 --overcommit lets 4 tasks
# share this host's cores; OUTPUT_DIR keeps the results files here. The scripts run in $TMP/out
# (--chdir) and write their logs there.
export REFIT_MODEL_DIR=${REFIT_MODEL_DIR:-$REFIT_SOURCE_DIR/configs/models}
export OUTPUT_DIR=$TMP/results
submit() {
  timeout 30 sbatch --parsable --chdir="$TMP/out" --output="$TMP/out/%x-%j.out" "$@" |
    cut -d';' -f1
}
# The one-node script runs twice: under mpirun (the default) and under srun --mpi=pmix.
node_job=$(CONFIG=$TMP/configs/a.json submit --ntasks=4 --overcommit \
  "$REFIT_SOURCE_DIR/slurm/refit-node.sbatch")
srun_job=$(CONFIG=$TMP/configs/b.json LAUNCHER=srun submit --ntasks=4 --overcommit \
  "$REFIT_SOURCE_DIR/slurm/refit-node.sbatch")
# The multi-node script on the one node there is: its ppr:N:node mapping, not disaggregation.
# Slurm will not overcommit --ntasks-per-node, so the node's 2 tasks carry 4 ranks.
nodes_job=$(CONFIG=$TMP/configs/a.json RANKS_PER_NODE=4 submit --nodes=1 --ntasks-per-node=2 \
  "$REFIT_SOURCE_DIR/slurm/refit-nodes.sbatch")
array_job=$(submit --ntasks=4 --overcommit --array=0-1 "$REFIT_SOURCE_DIR/slurm/refit-array.sbatch" "$TMP/configs/list")
log "submitted jobs $node_job (mpirun), $srun_job (srun), $nodes_job (multi-node script)" \
  "and array job $array_job (2 tasks)"
jobs=$node_job,$srun_job,$nodes_job,$array_job

# Waits until no job of this test is pending or running, or the deadline passes.
deadline=$((SECONDS + JOB_DEADLINE_S))
while [ -n "$(timeout 10 squeue -h -j "$jobs" -o %i 2>/dev/null || echo busy)" ]; do
  [ "$SECONDS" -lt "$deadline" ] || {
    timeout 10 squeue -j "$jobs" >&2 || true
    fail "jobs still queued or running after ${JOB_DEADLINE_S}s"
  }
  sleep 1
done
log "all jobs finished"

# job_field JOBID FIELD: one field of `scontrol show job` (kept for MinJobAge = 600 s).
job_field() {
  timeout 10 scontrol -o show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}

# check_job JOBID RESULTS: the job COMPLETED with 0:0, and its results file holds one run whose
# slurm_job_id is JOBID and whose slurm_job is scontrol's description of it. The file also
# passes the schema check of results/README.md when h5py is there (77: it is not).
checks=0
check_job() {
  local id=$1 h5=$2 st ec
  st=$(job_field "$id" JobState)
  ec=$(job_field "$id" ExitCode)
  if [ "$st" != COMPLETED ] || [ "$ec" != 0:0 ]; then
    fail "job $id ended $st with exit code $ec"
  fi
  [ -f "$h5" ] || fail "job $id wrote no $h5; results: $(ls "$TMP/results")"
  h5ls "$h5/runs" | grep -q '^0000 ' || fail "$h5 holds no run 0000"
  local got
  got=$(h5dump -a /runs/0000/slurm_job_id "$h5" | sed -n 's/^ *(0): "\(.*\)"$/\1/p')
  [ "$got" = "$id" ] || fail "$h5: slurm_job_id is '$got', expected '$id'"
  h5dump -a /runs/0000/slurm_job "$h5" | grep -q "JobId=$id " ||
    fail "$h5: slurm_job does not hold scontrol's description of job $id"
  local schema=0
  /usr/bin/python3 "$REFIT_SOURCE_DIR/tests/cli/results_h5py.py" "$h5" --runs 1 --ok \
    >"$TMP/schema.out" 2>&1 || schema=$?
  if [ "$schema" -ne 0 ] && [ "$schema" -ne 77 ]; then
    fail "$h5 does not conform to results/README.md: $(cat "$TMP/schema.out")"
  fi
  checks=$((checks + 1))
  log "job $id: $st $ec, $h5 run 0000 has slurm_job_id=$got"
}
check_job "$node_job" "$TMP/results/refit-$node_job.h5"
check_job "$srun_job" "$TMP/results/refit-$srun_job.h5"
grep -q "under srun:" "$TMP/out/refit-$srun_job.out" || fail "job $srun_job did not use srun"
check_job "$nodes_job" "$TMP/results/refit-$nodes_job.h5"
for task in 0 1; do
  id=$(timeout 10 scontrol -o show job "${array_job}_$task" | tr ' ' '\n' | sed -n 's/^JobId=//p')
  [ -n "$id" ] || fail "array task ${array_job}_$task is unknown to slurmctld"
  h5=$TMP/results/refit-${array_job}_$task.h5
  check_job "$id" "$h5"
  got=$(h5dump -a /runs/0000/slurm_array_task_id "$h5" | sed -n 's/^ *(0): "\(.*\)"$/\1/p')
  [ "$got" = "$task" ] || fail "$h5: slurm_array_task_id is '$got', expected '$task'"
done
log "all $checks jobs passed"
