#!/usr/bin/env bash
# GPU session 1 (device tool, one H100/H200): the course's full pre-training runs and the first CUDA
# benchmark of bertlib against transformers. Run from the repository root with the data in .data/ and the
# results written to $OUT (the device tool brings that folder back).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 BERTLIB_DATA_DIR=$PWD/.data HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" runs/gpu packed
exec > >(tee "$OUT/log.txt") 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc
python3 -c "import torch, transformers, tokenizers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__)"

echo "== smoke: tiny, 30 steps on cuda (also fills the corpus cache)"
timeout 60 python3 -m bertlib pretrain --preset tiny --max-steps 30 --batch-size 32 --eval-every 30 --eval-batches 5 \
  --save-every 30 --log-every 10 --device cuda --output-dir runs/gpu/smoke || { echo "smoke failed"; exit 1; }

echo "== the course's runs, side by side on one GPU"
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -lms 1000 > runs/gpu/gpu_util.csv &
SMI=$!
common="--batch-size 256 --eval-every 184 --save-every 184 --keep-checkpoints 100 --log-every 46 --num-workers 4 --device cuda"
timeout 300 python3 -m bertlib pretrain --preset mini --epochs 40 --lr 1e-3 $common --output-dir runs/gpu/mini-e40 > runs/gpu/mini-e40.log 2>&1 & P1=$!
timeout 300 python3 -m bertlib pretrain --preset mini --epochs 100 --lr 1e-3 $common --output-dir runs/gpu/mini-e100 > runs/gpu/mini-e100.log 2>&1 & P2=$!
timeout 300 python3 -m bertlib pretrain --preset small --epochs 40 --lr 5e-4 $common --output-dir runs/gpu/small-e40 > runs/gpu/small-e40.log 2>&1 & P3=$!
wait $P1 $P2 $P3
kill $SMI
for r in mini-e40 mini-e100 small-e40; do tail -c 600 runs/gpu/$r.log | tr '\r' '\n' | tail -4; done
for r in mini-e40 mini-e100; do python3 experiments/gpu/pack_run.py runs/gpu/$r packed/$r; done
tar czf "$OUT/mini-e40.tar.gz" -C packed mini-e40
tar czf "$OUT/mini-e100.tar.gz" -C packed mini-e100
tar czf "$OUT/runs-meta.tar.gz" --exclude=checkpoints runs/gpu

echo "== benchmark: bertlib vs transformers, bf16"
timeout 150 python3 benchmarks/train_step.py --suite cuda --output "$OUT/train_step-cuda.json"
echo "== profile: base, batch 64 x 128"
timeout 50 python3 benchmarks/profile_step.py --preset base --batch-size 64 --steps 5 --output "$OUT/profile-base.txt" > /dev/null
ls -la "$OUT"
