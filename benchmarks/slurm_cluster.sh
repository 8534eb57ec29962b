#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for tests that submit real Slurm jobs (sbatch job arrays, submitit).
#
#     sudo bash benchmarks/slurm_cluster.sh start    # install (Debian's slurmctld, slurmd, slurm-client, munge), start
#     bash benchmarks/slurm_cluster.sh status        # exit 0 if the node is up (idle, mixed or allocated)
#     sudo bash benchmarks/slurm_cluster.sh stop     # stop the slurmd, slurmctld and munged that `start` started
#
# The node is this machine (`hostname -s`), with `nproc` CPUs and its memory less a margin; one partition, `debug`
# (the default, no time limit). Made for a container without systemd or cgroups: no accounting (no slurmdbd, so
# `sacct` answers "Slurm accounting storage is disabled"), processes tracked by /proc, daemons run as root.
# Everything lives in $SLURM_STATE_DIR (default /tmp/ppo-slurm): etc/slurm.conf, state, spool, log/, run/ (pids).
# /etc/slurm/slurm.conf is made a symlink to etc/slurm.conf, so that plain sbatch/squeue/scontrol/sinfo of any
# process find the cluster without SLURM_CONF (a slurm.conf of the machine's own is kept as slurm.conf.orig).
#
# Time limits: slurmctld looks at them every 30 s (fixed in Slurm), so a job ends up to ~30 s after its limit
# (OverTimeLimit=0, then KillWait=10 s from SIGTERM to SIGKILL), and a --signal=SIG@S warning comes between S and
# S+30 s before the limit (at the first look after the start when S+30 s >= the limit). It goes to the job's steps
# (submitit's `srun`), not to the batch shell unless --signal=B:SIG@S. Jobs may be requeued (JobRequeue=1, e.g. by
# submitit after its USR2): a requeued job may start again cred_expire+1 s later (AuthInfo=cred_expire=10 here,
# $SLURM_CRED_EXPIRE; Slurm's default 120), and pending jobs are tried every 5 s, so it runs again ~12-15 s later.
set -euo pipefail

STATE=${SLURM_STATE_DIR:-/tmp/ppo-slurm}
CONF_DIR=$STATE/etc
CONF=$CONF_DIR/slurm.conf
SYS_CONF=/etc/slurm/slurm.conf
WAIT_S=${SLURM_START_WAIT_S:-60}
NODE=$(hostname -s)
PARTITION=debug

die() { echo "slurm_cluster.sh: error: $*" >&2; exit 1; }
alive() {  # pid file run/NAME.pid: is its process running, and NAME (not a pid reused since a reboot)?
    local pid
    pid=$(cat "$1" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] && [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$(basename "$1" .pid)" ]]
}

node_state() {  # idle, mixed, allocated, down*, ... ("" when slurmctld does not answer)
    timeout 10 sinfo -h -n "$NODE" -o %T 2>/dev/null | head -1 || true
}

node_up() {
    local s
    s=$(node_state)
    [[ $s == idle || $s == mixed || $s == allocated ]]
}

slurmd_registered_since() {  # epoch: has the node's slurmd registered with slurmctld since then?
    local t
    t=$(timeout 10 scontrol show node "$NODE" 2>/dev/null | grep -o 'SlurmdStartTime=[0-9T:-]*' | cut -d= -f2 || true)
    [[ -n $t ]] && (($(date -d "$t" +%s 2>/dev/null || echo 0) >= $1))
}

is_up() {
    command -v sinfo >/dev/null && alive "$STATE/run/slurmctld.pid" && alive "$STATE/run/slurmd.pid" && node_up
}

describe() {  # NODE, N CPUs, M MB, as slurmctld has the node
    local line
    line=$(timeout 10 sinfo -h -n "$NODE" -o '%n, %c CPUs, %m MB' 2>/dev/null | head -1 || true)
    echo "${line:-$NODE}"
}

install_packages() {
    local missing=() p
    for p in slurmctld slurmd slurm-client munge; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    command -v apt-get >/dev/null || die "cannot install ${missing[*]}: no apt-get here (Debian or Ubuntu needed)"
    # no daemon started by the packages' scripts: this script starts its own (and no systemd here to start them)
    local policy_made=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && policy_made=1
    fi
    local log=$STATE/log/apt.log ok=1
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1 || ok=0
    [[ $policy_made -eq 1 ]] && rm -f /usr/sbin/policy-rc.d
    [[ $ok -eq 1 ]] || die "apt-get install ${missing[*]} failed: $(grep -E '^(E|W):' "$log" | tail -1) (see $log)"
}

start_munge() {
    local key=/etc/munge/munge.key
    mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge
    if [[ ! -s $key ]]; then
        if command -v mungekey >/dev/null; then
            mungekey --create --keyfile="$key" >/dev/null 2>&1 || die "mungekey could not make $key"
        else
            dd if=/dev/urandom of="$key" bs=1 count=1024 status=none || die "could not make $key"
        fi
    fi
    local user=root
    if id munge >/dev/null 2>&1; then
        user=munge
        chown munge:munge /etc/munge "$key" /run/munge /var/lib/munge /var/log/munge
    fi
    chmod 700 /etc/munge && chmod 400 "$key" && chmod 755 /run/munge
    # a munged already running (ours or the machine's) is used as it is
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        return 0
    fi
    rm -f /run/munge/munged.pid "$STATE/run/munged.pid"
    local out
    if [[ $user == munge ]]; then
        out=$(runuser -u munge -- munged 2>&1) || die "munged did not start: $out"
    else
        out=$(munged --force 2>&1) || die "munged did not start: $out"
    fi
    local i
    for i in $(seq 50); do
        [[ -s /run/munge/munged.pid ]] && munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
        sleep 0.1
    done
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 || die "munged started but munge -n | unmunge fails"
    cp /run/munge/munged.pid "$STATE/run/munged.pid"  # started by this script: `stop` stops it
}

write_conf() {
    local cpus mem_mb margin
    cpus=$(nproc)
    mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
    margin=$((mem_mb / 20 > 512 ? mem_mb / 20 : 512))
    mem_mb=$((mem_mb - margin))
    mkdir -p "$CONF_DIR" "$STATE/state" "$STATE/spool" "$STATE/log" "$STATE/run"
    cat >"$CONF.tmp" <<EOF
# one-node Slurm cluster written by benchmarks/slurm_cluster.sh (state in $STATE)
ClusterName=ppo
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# a requeued job waits cred_expire+1 s before it may start again (Slurm's default 120 s; at least 5)
AuthInfo=cred_expire=${SLURM_CRED_EXPIRE:-10}
CredType=cred/munge
MpiDefault=none
SwitchType=switch/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
# pending jobs tried every 5 s (Slurm: 60 s), so that a requeued job starts soon after its BeginTime
SchedulerParameters=sched_interval=5,bf_interval=5
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
OverTimeLimit=0
KillWait=10
MinJobAge=30
InactiveLimit=0
Waittime=0
SlurmctldTimeout=60
SlurmdTimeout=60
StateSaveLocation=$STATE/state
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
    mv "$CONF.tmp" "$CONF"
    mkdir -p /etc/slurm
    if [[ -e $SYS_CONF || -L $SYS_CONF ]] && [[ "$(readlink -f "$SYS_CONF")" != "$(readlink -f "$CONF")" ]]; then
        if [[ -L $SYS_CONF ]]; then rm -f "$SYS_CONF"; else mv -f "$SYS_CONF" "$SYS_CONF.orig"; fi
    fi
    ln -sfn "$CONF" "$SYS_CONF"
}

start_daemon() {  # name, then its command line; waits for its pid file
    local name=$1 pidf=$STATE/run/$1.pid out i
    shift
    alive "$pidf" && return 0
    rm -f "$pidf"
    out=$("$@" 2>&1) || die "$name did not start: ${out:-$(tail -1 "$STATE/log/$name.log" 2>/dev/null)}"
    for i in $(seq 100); do
        alive "$pidf" && return 0
        sleep 0.1
    done
    die "$name did not start: $(grep -iE 'error|fatal' "$STATE/log/$name.log" 2>/dev/null | tail -1)"
}

start() {
    [[ $(id -u) -eq 0 ]] || die "start needs root (it installs packages and runs the daemons as root)"
    if is_up; then
        echo "slurm: one-node cluster already up ($(describe))"
        return 0
    fi
    local t0=$SECONDS
    mkdir -p "$STATE/log" "$STATE/run"
    install_packages
    start_munge
    if ! alive "$STATE/run/slurmctld.pid"; then
        if [[ -e $SYS_CONF ]] && timeout 10 scontrol ping 2>/dev/null | grep -q ' is UP'; then
            die "a slurmctld not started from $STATE already answers (see $SYS_CONF); stop it first"
        fi
        write_conf
    fi
    start_daemon slurmctld slurmctld -f "$CONF"
    local slurmd_t0
    slurmd_t0=$(date +%s)
    alive "$STATE/run/slurmd.pid" && slurmd_t0=0  # already running: registered before
    start_daemon slurmd slurmd -f "$CONF"
    local state="" t1=$SECONDS
    while ((SECONDS - t1 < WAIT_S)); do  # WAIT_S from the daemons' start (apt's time not counted)
        state=$(node_state)
        # idle and registered by this slurmd (slurmctld restarts with the node state it saved)
        [[ $state == idle || $state == mixed || $state == allocated ]] && slurmd_registered_since "$slurmd_t0" && break
        # a node that a past run left down/drained: ReturnToService=2 brings it back when slurmd registers
        [[ $state == down* || $state == drain* ]] && scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true
        sleep 1
    done
    node_up && slurmd_registered_since "$slurmd_t0" || die "node $NODE not idle after ${WAIT_S}s (sinfo says '${state:-nothing}'; see $STATE/log/)"
    echo "slurm: one-node cluster up ($(describe)) in $((SECONDS - t0)) s; config $CONF (linked from $SYS_CONF)"
}

stop_pid() {  # name: SIGTERM the daemon of its pid file in $STATE/run, wait, SIGKILL
    local name=$1 pidf=$STATE/run/$1.pid pid i
    if alive "$pidf"; then
        pid=$(cat "$pidf")
        kill -TERM "$pid" 2>/dev/null || true
        for i in $(seq 100); do
            alive "$pidf" || break
            sleep 0.1
        done
        if alive "$pidf"; then kill -KILL "$pid" 2>/dev/null || true; fi
        echo "slurm: stopped $name ($pid)"
    fi
    rm -f "$pidf"
}

stop() {
    [[ $(id -u) -eq 0 ]] || die "stop needs root"
    stop_pid slurmd
    stop_pid slurmctld
    stop_pid munged  # only a munged this script started has its pid here
}

case ${1:-} in
    start) start ;;
    stop) stop ;;
    status)
        if is_up; then
            echo "slurm: one-node cluster up ($(describe))"
        else
            echo "slurm: no one-node cluster up (node $NODE: $(node_state || true))" >&2
            exit 1
        fi
        ;;
    *)
        echo "usage: bash $0 start|stop|status" >&2
        exit 2
        ;;
esac
