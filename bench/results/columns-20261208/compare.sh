#!/bin/bash
# cmp.sh NP M K N STRATEGY [extra]: base vs new, 3 rounds, warm (median of 5 after 1) and cold (1 execution)
cd /work/main && source scripts/env.sh
NP=$1 M=$2 K=$3 N=$4 S=$5; shift 5
OS=""; [ $NP -gt 2 ] && OS="--oversubscribe"
t() { python3 -c "import json;d=json.load(open('$1'));print('%.4f'%d['runs'][0]['time_s'])"; }
for r in $(seq ${ROUNDS:-3}); do
 for b in ${BINS:-main63e cols1}; do
  mpirun -np $NP $OS /tmp/frozen/$b --strategy $S --m $M --k $K --n $N --warmup 1 --repeat 5 --no-verify --report /tmp/exp/w$$.json "$@" >/dev/null 2>&1
  mpirun -np $NP $OS /tmp/frozen/$b --strategy $S --m $M --k $K --n $N --no-verify --report /tmp/exp/c$$.json "$@" >/dev/null 2>&1
  echo "np$NP $M $K $N $S $* $b warm $(t /tmp/exp/w$$.json) cold $(t /tmp/exp/c$$.json)"
 done
done
