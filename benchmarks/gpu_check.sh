#!/usr/bin/env bash
# The checks that need a GPU, in one go (under 10 minutes): the CUDA tests, then steps per second on CUDA
# for both scripts on one process and, where there are two GPUs, on two (torchrun, NCCL); then each script
# with --compile, --bf16 and both against its defaults on one process (interleaved). One line per figure.
#     bash benchmarks/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
gpus=$(python -c "import torch; print(torch.cuda.device_count())")
if [ "$gpus" -lt 1 ]; then
    echo "no CUDA GPU: nothing to check" >&2
    exit 1
fi
python -c "import torch; print(f'gpu: {torch.cuda.get_device_name(0)} x {torch.cuda.device_count()}, torch {torch.__version__}')"
pytest -q -rs tests/test_distributed.py -k "cuda or nccl" 2>&1 | tail -n 3
pytest -q -rs tests/test_speedups.py 2>&1 | tail -n 3
nproc=$((gpus >= 2 ? 2 : 1))
for script in ppo_continuous.py ppo_atari.py; do
    python benchmarks/speed.py --script "$script" --processes "$nproc" --iterations 10 --runs 1 --sps-only | sed "s/^/cuda: /"
done
for script in ppo_continuous.py ppo_atari.py; do
    python benchmarks/speed.py --script "$script" --flag compile bf16 bf16+compile --iterations 10 --runs 2 --sps-only \
        | grep "^ratio" | sed "s/^/cuda: $script: /"
done
