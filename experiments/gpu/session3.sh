#!/usr/bin/env bash
# GPU session 3: notebook 07 in full mode (the course model trained by the notebook itself, 100 epochs of mini),
# executed with nbclient (carried as wheels in .whl/), then its run packed to bring back.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 BERTLIB_DATA_DIR=$PWD/.data HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" packed
exec > >(tee "$OUT/log.txt") 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
echo "== notebook 07, full mode"
timeout 450 python3 experiments/gpu/run_notebook.py notebooks/07_pretraining.ipynb --timeout 440
cp notebooks/07_pretraining.ipynb "$OUT/"
python3 experiments/gpu/pack_run.py notebooks/runs/course-full packed/course-full && tar czf "$OUT/course-full.tar.gz" -C packed course-full
ls -la "$OUT"
