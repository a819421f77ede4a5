#!/usr/bin/env bash
# GPU session 4 (issue 18's remaining parts), one part per device call (each under the tool's 10 minutes):
#   speed     the cuda suite against transformers, compiled and eager, random and real (WikiText-2) batches;
#             the fine-tuning step and predict on SST-2 against transformers (bf16);
#             the profile of a base step after (head index from the CPU, compiled) to set beside profile-base-before
#   loader    what the loader supplies with 0-8 workers against what a compiled mini step consumes, and the GPU's
#             busy share sampled every 200 ms during 1,500 steps of mini at batch 256
#   finetune  SST-2 (3 seeds) and SQuAD on every training example, from the course model and from random weights
#   small     small for 100 epochs (the size comparison; small-e40 was still improving when it ended)
# Run from the repository root with the data in .data/ (carried); results land in $OUT.
#   bash experiments/gpu/session4.sh speed
set -uo pipefail
part=${1:?"give a part: speed, loader, finetune or small"}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 BERTLIB_DATA_DIR=$PWD/.data HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" runs/gpu packed
exec > >(tee "$OUT/log-$part.txt") 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"

case $part in
speed)
  timeout 330 python3 benchmarks/train_step.py --suite cuda --output "$OUT/train_step-cuda.json"
  timeout 150 python3 benchmarks/train_step.py --suite cuda --no-compile --no-memory --output "$OUT/train_step-cuda-eager.json"
  timeout 120 python3 benchmarks/finetune_step.py --device cuda --output "$OUT/finetune_step-cuda.json"
  timeout 90 python3 benchmarks/profile_step.py --compile --output "$OUT/profile-base-after.txt" > /dev/null
  ;;
loader)
  timeout 150 python3 benchmarks/data_pipeline.py --batch-size 256 --workers 0 1 2 4 8 --repeats 1 \
    --output "$OUT/data_pipeline-gpu-host.json"
  nvidia-smi --query-gpu=timestamp,utilization.gpu --format=csv,noheader,nounits -lms 200 > "$OUT/gpu-util-mini.csv" &
  SMI=$!
  timeout 360 python3 -m bertlib pretrain --preset mini --max-steps 1500 --batch-size 256 --lr 1e-3 --compile \
    --num-workers 8 --eval-every 1500 --save-every 1500 --log-every 50 --device cuda --output-dir runs/gpu/mini-idle
  kill $SMI
  cp runs/gpu/mini-idle/metrics.jsonl "$OUT/mini-idle-metrics.jsonl"
  ;;
finetune)
  timeout 570 python3 experiments/finetune_study.py run sst2-full squad-full
  tar czf "$OUT/finetune-results.tar.gz" experiments/finetune_study/results
  ;;
small)
  timeout 570 python3 -m bertlib pretrain --preset small --epochs 100 --batch-size 256 --lr 5e-4 --compile \
    --num-workers 8 --eval-every 186 --save-every 186 --keep-checkpoints 100 --log-every 62 --device cuda \
    --output-dir runs/gpu/small-e100
  python3 experiments/gpu/pack_run.py runs/gpu/small-e100 packed/small-e100 && tar czf "$OUT/small-e100.tar.gz" -C packed small-e100
  ;;
*) echo "unknown part: $part (speed, loader, finetune or small)"; exit 2 ;;
esac
ls -la "$OUT"
