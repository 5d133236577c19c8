#!/usr/bin/env bash
# distmm across hosts, proven on one machine: two network namespaces joined by a veth link are
# two hosts with their own addresses; mpirun runs from the first over TCP only, and a launch
# agent starts Open MPI's daemon inside the target namespace in place of ssh (plm_rsh_agent).
#   1. every strategy (and train) across the hosts equals single-process results;
#   2. a rank killed on the second host ends the job within seconds, naming rank and host,
#      and no output file is written;
#   3. the link to the second host cut mid-run: the ranks that lose their peer report the
#      stall within --timeout; mpirun cannot reach the vanished host's daemon, so the test
#      ends what is left by process id after its own bound.
# Only addresses inside the namespaces this script creates are used; it removes them on exit.
# Usage: multihost_test.sh DISTMM   (exit 77: skipped, with the reason printed)
set -u
DISTMM=$(realpath "$1")
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIPPED: network namespaces need root"
  exit 77
fi
probe="dmprobe$$"
if ! ip netns add "$probe" 2>/dev/null; then
  echo "SKIPPED: ip netns does not work here"
  exit 77
fi
ip netns del "$probe"

tag="dm$$"
H1="${tag}a"
H2="${tag}b"
NET=10.203.7
work=$(mktemp -d)
[ -n "${KEEP_WORK:-}" ] && echo "work dir: $work"
failures=0
started=$(date +%s)

cleanup() {
  for ns in "$H1" "$H2"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
  done
  [ -n "${KEEP_WORK:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

check() {  # check DESCRIPTION CONDITION...
  local what="$1"
  shift
  if "$@"; then
    echo "ok: $what"
  else
    echo "FAILED: $what"
    failures=$((failures + 1))
  fi
}

# Two hosts: namespaces, a veth link, addresses, and host names each namespace resolves.
ip netns add "$H1" && ip netns add "$H2" || exit 1
ip link add "v${tag}a" type veth peer name "v${tag}b"
ip link set "v${tag}a" netns "$H1"
ip link set "v${tag}b" netns "$H2"
ip -n "$H1" addr add "$NET.1/24" dev "v${tag}a"
ip -n "$H2" addr add "$NET.2/24" dev "v${tag}b"
for ns in "$H1" "$H2"; do
  ip -n "$ns" link set lo up
  mkdir -p "/etc/netns/$ns"
  printf '127.0.0.1 localhost\n%s.1 %s\n%s.2 %s\n' "$NET" "$H1" "$NET" "$H2" > "/etc/netns/$ns/hosts"
done
ip -n "$H1" link set "v${tag}a" up
ip -n "$H2" link set "v${tag}b" up

# The launch agent: called by mpirun as `agent [options] HOST COMMAND...`, it runs COMMAND
# inside HOST's namespace, with HOST as its host name.
cat > "$work/agent" <<'EOF'
#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
host="$1"
shift
exec ip netns exec "$host" unshare --uts sh -c "hostname $host; exec $*"
EOF
chmod +x "$work/agent"
printf '%s slots=2\n%s slots=2\n' "$H1" "$H2" > "$work/hosts"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_CORETYPE=Haswell

# mpirun_on_hosts NP [mpirun options] -- distmm arguments: runs from the first host.
mpirun_on_hosts() {
  local np="$1"
  shift
  ip netns exec "$H1" unshare --uts sh -c "hostname $H1; exec mpirun --hostfile $work/hosts \
    -np $np --oversubscribe --mca mpi_yield_when_idle 1 --bind-to none \
    --mca plm_rsh_agent $work/agent \
    --mca btl tcp,self --mca btl_tcp_if_include $NET.0/24 --mca oob_tcp_if_include $NET.0/24 \
    $*"
}

# 1. Results across hosts equal single-process results (integer inputs: exactly).
awk 'BEGIN { for (i = 0; i < 7; i++) { for (j = 0; j < 5; j++) printf "%s%d", (j ? "," : ""), (i * 5 + j) % 9 - 4; print "" } }' > "$work/a.csv"
awk 'BEGIN { for (i = 0; i < 5; i++) { for (j = 0; j < 9; j++) printf "%s%d", (j ? "," : ""), (i * 9 + j) % 7 - 3; print "" } }' > "$work/b.csv"
"$DISTMM" --ranks 1 --strategy dp --a "$work/a.csv" --b "$work/b.csv" --out "$work/ref.csv" > /dev/null
for strategy in dp fsdp fsdp-overlap; do
  timeout 60 bash -c "$(declare -f mpirun_on_hosts); H1=$H1 work=$work NET=$NET; mpirun_on_hosts 3 -q \
    $DISTMM --strategy $strategy --a $work/a.csv --b $work/b.csv --out $work/c_$strategy.csv" \
    > "$work/out.log" 2>&1
  code=$?
  check "$strategy across 2 hosts exits 0 (verified against A * B)" test "$code" -eq 0
  check "$strategy: C equals the single-process product" cmp -s "$work/ref.csv" "$work/c_$strategy.csv"
  check "$strategy: the table says where the ranks ran" grep -q "placement: rank 0-1 on $H1, rank 2 on $H2" "$work/out.log"
done
# hsdp on 4 ranks, 2 per host: by default one replica per host (R = 2), so each shard group
# all-gathers B within its host.
timeout 60 bash -c "$(declare -f mpirun_on_hosts); H1=$H1 work=$work NET=$NET; mpirun_on_hosts 4 -q \
  $DISTMM --strategy hsdp --a $work/a.csv --b $work/b.csv --out $work/c_hsdp.csv" \
  > "$work/hsdp.log" 2>&1
check "hsdp across 2 hosts exits 0 (verified against A * B)" test $? -eq 0
check "hsdp: C equals the single-process product" cmp -s "$work/ref.csv" "$work/c_hsdp.csv"
check "hsdp: one replica per host by default (R=2)" grep -q "hsdp R=2" "$work/hsdp.log"
timeout 60 bash -c "$(declare -f mpirun_on_hosts); H1=$H1 work=$work NET=$NET; mpirun_on_hosts 3 -q \
  $DISTMM train --steps 5 --m 40 --k 6 --n 5" > "$work/train.log" 2>&1
check "train dp and fsdp across 2 hosts agree with single-process SGD (exit 0)" test $? -eq 0
[ $failures -eq 0 ] || cat "$work/out.log" "$work/hsdp.log" "$work/train.log"

# Waits until a distmm process runs in namespace $1 and prints its pid.
distmm_pid_in() {
  for _ in $(seq 1 200); do
    for pid in $(ip netns pids "$1" 2>/dev/null); do
      if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "distmm" ]; then
        echo "$pid"
        return 0
      fi
    done
    sleep 0.05
  done
  return 1
}

# 2. kill -9 of the rank on the second host mid-run.
echo "untouched" > "$work/keep.csv"
# --repeat 100 keeps the run going for tens of seconds, so the fault lands mid-run even on a
# quiet machine where one execution takes 0.4 s (the cut at 1.5 s once found the run finished).
big="--strategy dp --m 2500 --k 2500 --n 2500 --repeat 100 --out $work/keep.csv"
start=$(date +%s.%N)
bash -c "$(declare -f mpirun_on_hosts); H1=$H1 work=$work NET=$NET; mpirun_on_hosts 3 $DISTMM $big" \
  > "$work/kill.log" 2>&1 &
job=$!
victim=$(distmm_pid_in "$H2")
sleep 0.3
kill -9 "$victim" 2>/dev/null
( sleep 30; kill -9 "$job" 2>/dev/null ) &
guard=$!
wait "$job"
code=$?
kill "$guard" 2>/dev/null
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
check "killed rank: mpirun exits non-zero (exit $code)" test "$code" -ne 0
check "killed rank: the job ends within 20 s (took ${elapsed} s)" test "$(echo "$elapsed < 20" | bc)" -eq 1
check "killed rank: the message names rank 2 and host $H2" grep -q "rank 2 .*on node $H2" "$work/kill.log"
check "killed rank: the output file is untouched" grep -qx "untouched" "$work/keep.csv"
[ $failures -eq 0 ] || cat "$work/kill.log"

# 3. The link to the second host cut mid-run, with --timeout 3.
bash -c "$(declare -f mpirun_on_hosts); H1=$H1 work=$work NET=$NET; mpirun_on_hosts 3 $DISTMM $big --timeout 3" \
  > "$work/cut.log" 2>&1 &
job=$!
distmm_pid_in "$H2" > /dev/null
# Past MPI's start-up (MPI_Init and communicator creation, which --timeout does not bound):
# the ranks are in distmm's own communication or compute when the link goes.
sleep 1.5
ip -n "$H2" link set "v${tag}b" down
cut_at=$(date +%s)
# Our own bound: mpirun cannot reach the daemon on the vanished host, so it may never return.
for _ in $(seq 1 200); do
  kill -0 "$job" 2>/dev/null || break
  grep -q "waited more than 3 s" "$work/cut.log" && [ $(($(date +%s) - cut_at)) -ge 8 ] && break
  sleep 0.1
done
for ns in "$H1" "$H2"; do ip netns pids "$ns" | xargs -r kill -9 2>/dev/null; done
kill -9 "$job" 2>/dev/null
wait "$job" 2>/dev/null
check "cut link: the ranks on $H1 report what they waited on (--timeout 3)" grep -q "waited more than 3 s in" "$work/cut.log"
check "cut link: the output file is untouched" grep -qx "untouched" "$work/keep.csv"
[ $failures -eq 0 ] || cat "$work/cut.log"

echo "multihost test: $failures failed, $(($(date +%s) - started)) s"
[ $failures -eq 0 ]
