"""Run by torchrun from tests/test_distributed.py: one rank of a multi-process check.

torchrun --standalone --nproc-per-node 2 tests/distributed_worker.py update OUT_DIR
torchrun --standalone --nproc-per-node 2 tests/distributed_worker.py target_kl OUT_DIR
torchrun --standalone --nproc-per-node 2 tests/distributed_worker.py collectives OUT_DIR
torchrun --standalone --nproc-per-node 2 tests/distributed_worker.py merge OUT_DIR
torchrun --standalone --nproc-per-node 2 tests/distributed_worker.py train OUT_DIR -- SCRIPT_FLAGS...
(with the repository root on PYTHONPATH, as test_distributed.py's torchrun sets it)
"""

import dataclasses
import os
import sys
from pathlib import Path

import torch

import ppo_continuous as C


def fixed_batch():
    """conftest's hand-made rollout (the one test_update.py checks update() on), with more autoreset
    steps in the first half of its envs than in the second, so that the two ranks hold different
    numbers of samples."""
    from conftest import args_for, make_agent, make_rollout

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


def target_kl(out_dir: str) -> None:
    """An update whose --target-kl stop only the KL of every rank's samples decides: rank 0's samples look
    far off-policy (log-ratio 1), rank 1's on-policy, and the limit lies between the mean over both ranks'
    samples and rank 0's own mean. Each rank writes the epochs it ran and the parameters it reached."""
    agent, buf, advantages, returns, args = fixed_batch()
    C.start_distributed(agent, torch.device("cpu"))
    rank, world = C.RANK, int(os.environ["WORLD_SIZE"])
    half = slice(rank * buf.obs.shape[1] // world, (rank + 1) * buf.obs.shape[1] // world)
    for field in ("obs", "actions", "logprobs", "values", "rewards", "terminations", "truncations", "real"):
        setattr(buf, field, getattr(buf, field)[:, half])
    with torch.no_grad():  # the agent's own log-probs, less one on rank 0
        _, logprobs, _, _ = agent.get_action_and_value(buf.obs.flatten(0, 1), buf.actions.flatten(0, 1))
    buf.logprobs = logprobs.view(buf.logprobs.shape) - (1.0 if rank == 0 else 0.0)
    counts = C.all_sum(torch.tensor([float(buf.real.sum()) if r == rank else 0.0 for r in range(world)]))
    rank0_kl = C.kl_k3(torch.tensor(1.0)).item()  # e - 2 on each of rank 0's samples, 0 on rank 1's
    limit = rank0_kl * (1 + counts[0].item() / counts.sum().item()) / 2  # above the global mean, below rank 0's
    args = dataclasses.replace(args, target_kl=limit, update_epochs=2)
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3, eps=C.ADAM_EPS)
    metrics = C.update(agent, optimizer, buf, advantages[:, half], returns[:, half], args, 1.0, 0.2)
    torch.save({"agent": agent.state_dict(), "epochs_done": metrics["losses/epochs_done"]}, f"{out_dir}/kl{rank}.pt")


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
    try:
        C.main(tyro.cli(C.Args, args=flags))
    except SystemExit as stop:  # each rank's exit code, which torchrun does not print when a Ctrl-C stops it too
        Path(f"{out_dir}/exit{C.RANK}.txt").write_text(str(stop.code))
        raise


def collectives(out_dir: str) -> None:
    """start_distributed of ranks whose weights differ, global_mean and global_var of samples of unequal counts (rank r
    holds 3 + 4 r of them), and minibatch_moments of ranks far apart; each rank writes what it got."""
    start = torch.nn.Linear(1, 1)  # each rank's own weights before start_distributed: r + 1 and -(r + 1)
    with torch.no_grad():
        start.weight.fill_(C.RANK + 1.0)
        start.bias.fill_(-C.RANK - 1.0)
    C.start_distributed(start, torch.device("cpu"))
    x = 10.0 * C.RANK + torch.arange(3 + 4 * C.RANK, dtype=torch.float32)
    y = 100.0 * C.RANK + torch.arange(6, dtype=torch.float32)  # two minibatches of 3 on each rank
    moments = C.minibatch_moments(y, [slice(0, 3), slice(3, 6)])
    net, rows = averaged_net()
    mine = rows[:2] if C.RANK == 0 else rows[2:]  # 2 and 4 samples: each rank's loss is the mean over its own
    net(mine).square().mean().backward()
    C.average_gradients(net, len(mine))
    ev = C.explained_variance(x + off_by(len(x)), x)
    got = {"start": start.state_dict()}
    got |= {"mean": C.global_mean(x), "var": C.global_var(x), "moments": moments, "grad": net.weight.grad, "ev": ev}
    torch.save(got, f"{out_dir}/collectives{C.RANK}.pt")


def off_by(n: int) -> torch.Tensor:
    """Prediction errors for explained_variance: +1, -1, +1, ..."""
    return 1.0 - 2.0 * (torch.arange(n) % 2)


def averaged_net() -> tuple[torch.nn.Linear, torch.Tensor]:
    """A fixed linear layer and the 6 samples the two ranks split for average_gradients."""
    net = torch.nn.Linear(3, 1)
    with torch.no_grad():
        net.weight.copy_(torch.tensor([[0.5, -1.0, 0.25]]))
        net.bias.fill_(0.1)
    return net, torch.arange(18.0).view(6, 3)


def wrapped_stats(obs_rms: "C.RunningMeanStd", return_rms: "C.RunningMeanStd"):
    """A stand-in for the chain of wrappers around the envs: the running statistics are all merging reads."""
    from types import SimpleNamespace

    inner = SimpleNamespace(obs_rms=obs_rms, return_rms=return_rms, update_running_mean=True, env=None)
    return SimpleNamespace(env=inner)


def merge_data(rank: int) -> tuple:
    """What rank r saw since the last merge: 5 + 3 r observations around 10 r, returns around -r (so the
    ranks' means differ, and the merged variance must count their spread)."""
    g = torch.Generator().manual_seed(rank)
    n = 5 + 3 * rank
    return (10.0 * rank + torch.randn(n, 3, generator=g)).double().numpy(), (
        torch.randn(n, generator=g) - rank
    ).double().numpy()


def merge(out_dir: str) -> None:
    """merge_normalization after each rank went on from the same prior with its own data; each rank writes the
    statistics it goes on with."""
    C.start_distributed(torch.nn.Linear(1, 1), torch.device("cpu"))
    obs_rms, return_rms = C.RunningMeanStd((3,)), C.RunningMeanStd(())
    obs_rms.update(torch.arange(12.0).view(4, 3).double().numpy())  # the prior: the last merge's statistics
    envs = wrapped_stats(obs_rms, return_rms)
    prior = C.normalization_state(envs)
    obs, returns = merge_data(C.RANK)
    obs_rms.update(obs)
    return_rms.update(returns)
    torch.save(C.merge_normalization(envs, prior), f"{out_dir}/merge{C.RANK}.pt")


if __name__ == "__main__":
    mode, out = sys.argv[1], sys.argv[2]
    {"update": update, "target_kl": target_kl, "collectives": collectives, "merge": merge}[mode](
        out
    ) if mode != "train" else train(out, sys.argv[4:])
