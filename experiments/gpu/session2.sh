#!/usr/bin/env bash
# GPU session 2: mini to convergence (100 epochs, batch 256) at two learning rates, side by side on one GPU.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 BERTLIB_DATA_DIR=$PWD/.data HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" runs/gpu packed
exec > >(tee "$OUT/log.txt") 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -lms 1000 > runs/gpu/gpu_util2.csv &
SMI=$!
common="--preset mini --epochs 100 --batch-size 256 --eval-every 186 --save-every 186 --keep-checkpoints 100 --log-every 62 --num-workers 6 --device cuda"
timeout 450 python3 -m bertlib pretrain --lr 1e-3 $common --output-dir runs/gpu/mini-e100-lr1e-3 > runs/gpu/mini-e100-lr1e-3.log 2>&1 & P1=$!
timeout 450 python3 -m bertlib pretrain --lr 2e-3 $common --output-dir runs/gpu/mini-e100-lr2e-3 > runs/gpu/mini-e100-lr2e-3.log 2>&1 & P2=$!
wait $P1 $P2
kill $SMI
for r in mini-e100-lr1e-3 mini-e100-lr2e-3; do tail -c 400 runs/gpu/$r.log | tr '\r' '\n' | tail -4; python3 experiments/gpu/pack_run.py runs/gpu/$r packed/$r; tar czf "$OUT/$r.tar.gz" -C packed $r; done
tar czf "$OUT/runs-meta.tar.gz" --exclude=checkpoints runs/gpu
ls -la "$OUT"
