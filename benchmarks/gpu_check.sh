#!/usr/bin/env bash
# The checks that need a GPU, each part under its own time limit (so that a slow part leaves the others their
# turn; about 20 minutes in all): the CUDA tests; steps per second on CUDA for both scripts on one process and,
# where there are two GPUs, on two (torchrun, NCCL); the suite's end-to-end tests with the GPU in view (every run
# they start without --no-cuda trains on CUDA); each script with --compile, --bf16 and both against its defaults
# on one process (interleaved; 20 iterations, compilation included). One line per figure.
#     bash benchmarks/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
gpus=$(python -c "import torch; print(torch.cuda.device_count())")
if [ "$gpus" -lt 1 ]; then
    echo "no CUDA GPU: nothing to check" >&2
    exit 1
fi
python -c "import torch; print(f'gpu: {torch.cuda.get_device_name(0)} x {torch.cuda.device_count()}, torch {torch.__version__}')"
timeout 300 pytest -q -rs tests/test_distributed.py -k "cuda or nccl or gpus" 2>&1 | tail -n 3
timeout 300 pytest -q -rs tests/test_speedups.py 2>&1 | tail -n 3
nproc=$((gpus >= 2 ? 2 : 1))
for script in ppo_continuous.py ppo_atari.py; do
    timeout 300 python benchmarks/speed.py --script "$script" --processes "$nproc" --iterations 10 --runs 1 --sps-only \
        | sed "s/^/cuda: /"
done
suite=(tests/test_atari.py tests/test_continuous.py tests/test_custom_env.py tests/test_distributed.py)
timeout 600 pytest -q -rfE "${suite[@]}" tests/test_lifecycle.py tests/test_update.py tests/test_wiring.py 2>&1 | tail -n 30
for script in ppo_continuous.py ppo_atari.py; do
    timeout 600 python benchmarks/speed.py --script "$script" --flag compile bf16 bf16+compile --iterations 20 --runs 1 \
        --sps-only | grep "^ratio" | sed "s/^/cuda: $script: /"
done
