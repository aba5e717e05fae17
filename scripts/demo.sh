#!/usr/bin/env bash
# make demo: a real PyTorch job (examples/pytorch/train.py, DDP on gloo)
# trained under rescale-launch on this machine, sized by a rescaled started
# here (memory state, 4 GPU slots: on a CPU host a slot is one worker
# process). Prints each size Rescale chose and why, and `rescalectl get jobs`
# while it trains. Everything it starts is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
work=$(mktemp -d /tmp/rescale-demo.XXXXXX)
rescaled_pid=""
cleanup() {
  [[ -n "$rescaled_pid" ]] && kill "$rescaled_pid" 2>/dev/null && wait "$rescaled_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

"$BUILD/rescaled" --listen=127.0.0.1:0 --metrics_listen= --state=memory --capacity_gpus=4 \
  --plan_interval=2s --cooldown=5s > "$work/rescaled.log" 2>&1 &
rescaled_pid=$!
for _ in $(seq 100); do
  grep -q "serving on" "$work/rescaled.log" && break
  sleep 0.1
done
server=$(grep -o "serving on [0-9.:]*" "$work/rescaled.log" | cut -d' ' -f3)
echo "== rescaled serving on $server (memory state, 4 slots)"

# kubedl's hill climb (1, 2, 4 workers, keep the best): on one host the
# planner has nothing to compare a first size with, so the demo lets the
# policy that measures choose.
echo "== rescale-launch --job demo/mlp --min 1 --max 4 --policy kubedl examples/pytorch/train.py"
PYTHONPATH="$BUILD/python" "$PYTHON" -u -m rescale.launch --server "$server" --job demo/mlp \
  --min 1 --max 4 --policy kubedl --restart-cost 5 --total-samples 384000 \
  --local-batch-size 64 examples/pytorch/train.py --checkpoint-dir "$work/checkpoints" \
  --summary "$work/summary.json" 2>&1 | grep --line-buffered -v "^step " &
launch_pid=$!
while kill -0 "$launch_pid" 2>/dev/null; do
  sleep 8
  kill -0 "$launch_pid" 2>/dev/null || break
  echo "== rescalectl get jobs"
  "$BUILD/rescalectl" --server "$server" get jobs 2>/dev/null || true
done
wait "$launch_pid"
echo "== the trainer's own summary"
cat "$work/summary.json"; echo
