"""Run by torchrun from tests/test_distributed.py: one rank of a multi-process check.

torchrun --standalone --nproc-per-node 2 tests/distributed_worker.py update OUT_DIR
torchrun --standalone --nproc-per-node 2 tests/distributed_worker.py train OUT_DIR -- SCRIPT_FLAGS...
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ppo_continuous as C  # noqa: E402


def fixed_batch():
    """test_update's hand-made rollout, with more autoreset steps in the first half of its envs than in
    the second, so that the two ranks hold different numbers of samples."""
    from test_update import args_for, make_agent, make_rollout

    agent = make_agent()
    buf, advantages, returns = make_rollout(agent)
    buf.real[:4, 1] = False
    args = args_for(num_minibatches=1, update_epochs=4, target_kl=0.5)
    return agent, buf, advantages, returns, args


def update(out_dir: str) -> None:
    """One update on this rank's half of the fixed batch; rank 0 writes the parameters it reached."""
    agent, buf, advantages, returns, args = fixed_batch()
    C.start_distributed(agent, torch.device("cpu"))
    rank, world = C.RANK, int(os.environ["WORLD_SIZE"])
    half = slice(rank * buf.obs.shape[1] // world, (rank + 1) * buf.obs.shape[1] // world)  # envs split
    for field in ("obs", "actions", "logprobs", "values", "rewards", "terminations", "truncations", "real"):
        setattr(buf, field, getattr(buf, field)[:, half])
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3, eps=C.ADAM_EPS)
    metrics = C.update(agent, optimizer, buf, advantages[:, half], returns[:, half], args, 1.0, 0.2)
    if rank == 0:
        torch.save({"agent": agent.state_dict(), "epochs_done": metrics["losses/epochs_done"]}, f"{out_dir}/update.pt")


def train(out_dir: str, flags: list[str]) -> None:
    """A real run of the script's main; every rank writes what it holds at each checkpoint, and its
    first observations."""
    import tyro

    real_save, real_collect = C.save_checkpoint, C.collect_rollout
    first_obs = []

    def save_and_dump(path, agent, optimizer, envs, args, progress):
        real_save(path, agent, optimizer, envs, args, progress)
        state = {"agent": agent.state_dict(), "normalization": C.normalization_state(envs), "first_obs": first_obs}
        torch.save(state | {"progress": progress}, f"{out_dir}/rank{C.RANK}.pt")

    def collect(envs, agent, buf, state, device):
        if not first_obs:
            first_obs.append(state.obs.clone())
        return real_collect(envs, agent, buf, state, device)

    C.save_checkpoint, C.collect_rollout = save_and_dump, collect
    C.main(tyro.cli(C.Args, args=flags))


if __name__ == "__main__":
    mode, out = sys.argv[1], sys.argv[2]
    update(out) if mode == "update" else train(out, sys.argv[4:])
