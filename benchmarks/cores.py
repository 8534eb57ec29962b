"""How many cores a benchmark may use: the one count that grid.py and speed.py split between their processes.

python benchmarks/cores.py      # prints it
"""

import os
import platform


def usable_cores() -> int:
    """OMP_NUM_THREADS when it is set, else the cores this process may run on (its affinity: a cpuset's or a Slurm
    job's share, not the host's count; a CPU quota is not seen), so runs side by side do not oversubscribe."""
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        return int(threads)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux, else what platform knows): every speed figure names it."""
    try:
        with open("/proc/cpuinfo") as f:
            models = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        if models:
            return models[0]
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


if __name__ == "__main__":
    print(usable_cores())
