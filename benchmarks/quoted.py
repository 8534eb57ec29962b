"""The figures that the README's and docs' prose quotes from the records, as phrases of the page with a field where a
figure stands: {name} or {name:format spec}, a name of tables.py's build() (`python benchmarks/tables.py --names`
lists them with their values). `tables.py --check` (and the suite) fails when a phrase is gone from its page or a
figure in it is no longer what the records give; `tables.py --write` puts the records' figures in. A space in a
phrase matches any run of spaces and line breaks.

Names: {grid}/{variant}/{env}/{seed}/{figure} for one run (env without -v4 or NoFrameskip-v4; figure last_10,
last_100, eval, minutes, sps, human, reset_share: the % of the steps that were autoreset steps, Atari),
{grid}/{variant}/{env}/{mean|std|min|max}/{figure} over its seeds, {grid}/{variant}/{all|seed1|...}/{min|max}/
{minutes|sps} over a setting's envs, and the intervals and ratios build() names beside its tables
({study}/{setting}/{p|p_ci|iqm|iqm_ci|runs|verdict}, ratio/{env}/cleanrl, ...).
"""


def runs(prefix: str, figure: str = "last_100", spec: str = ".0f", seeds: tuple = (1, 2, 3), last: str = ", ") -> str:
    """'{prefix/1/figure:spec}, {prefix/2/figure:spec}{last}{prefix/3/figure:spec}': a run per seed, as prose lists."""
    fields = [f"{{{prefix}/{seed}/{figure}:{spec}}}" for seed in seeds]
    return ", ".join(fields[:-1]) + last + fields[-1]


def pm(prefix: str, figure: str = "last_100", spec: str = ".0f") -> str:
    return f"{{{prefix}/mean/{figure}:{spec}}} +- {{{prefix}/std/{figure}:{spec}}}"


def p(study: str, setting: str) -> str:
    return f"{{{study}/{setting}/p:.2f}} {{{study}/{setting}/p_ci}}"


MUJOCO, ATARI = "mujoco/default", "atari/default"
T1, T1M, DETAILS = "table1/clip-0.2", "table1-1m", "details"
AND = " and "

QUOTED_IN: dict[str, list[str]] = {
    "README.md": [
        f"beat the defaults in every run, {pm('tuned/study/Swimmer')} against {pm('tuned/defaults/Swimmer')} over 4"
        f" seeds (P(better) {{tuned/Swimmer/tuned/p:.2f}}, 95% interval {{tuned/Swimmer/tuned/p_ci}}):",
        f"On Hopper-v4 (1M steps, 3 seeds) it evaluated {{{MUJOCO}/Hopper/mean/eval:.0f}} against 2470,",
        "which three seeds do not separate (P(higher) = {reward-scaling/evaluation/p:.2f}, 95% CI"
        " {reward-scaling/evaluation/p_ci}).",
        "the IQM of the {paper7/default/runs} runs is {paper7/default/iqm:.2f} (95% interval {paper7/default/iqm_ci};",
        f"one Swimmer seed of three stayed at {{{MUJOCO}/Swimmer/3/last_100:.0f}} (a tuned",
        "this project's mean over its last 10 is {ratio/HalfCheetah/cleanrl-here:.1f} times that.",
        "the IQM of the {cleanrl/default/runs} runs on the five envs with such a figure is {cleanrl/default/iqm:.2f}"
        " ({cleanrl/default/iqm_ci};",
        "the interquartile mean of the {atari/default/runs} runs' last 100 games is {atari/default/iqm:.2f} (95%"
        " stratified-bootstrap interval {atari/default/iqm_ci}):",
        f"Breakout's runs came to {{{ATARI}/Breakout/min/human:.2f}} to {{{ATARI}/Breakout/max/human:.2f}} of a"
        f" human's score, Pong's to {{{ATARI}/Pong/max/human:.2f}} at most and BeamRider's to"
        f" {{{ATARI}/BeamRider/max/human:.2f}}.",
    ],
    "docs/results.md": [
        f"9 envs x 3 seeds x 1M steps, {{{MUJOCO}/all/min/minutes:.0f}} to {{{MUJOCO}/all/max/minutes:.0f}} minutes"
        " per run on one core",
        f"InvertedDoublePendulum {runs(MUJOCO + '/InvertedDoublePendulum', last=AND)} (7102.9); InvertedPendulum"
        f" {{{MUJOCO}/InvertedPendulum/min/last_100:.0f}} in every seed, the most an episode can score (809.4);"
        f" Reacher {runs(MUJOCO + '/Reacher', spec='.1f', last=AND)} (-6.71); Swimmer"
        f" {runs(MUJOCO + '/Swimmer', spec='.1f', last=AND)} (111.2):",
        f"({{{MUJOCO}/all/min/minutes:.0f}} to {{{MUJOCO}/all/max/minutes:.0f}} minutes a run,",
        "the IQM of the {paper7/default/runs} runs' last 100 episodes is {paper7/default/iqm:.2f}, 95%"
        " stratified-bootstrap interval {paper7/default/iqm_ci} (`tables.py`):",
        f"below it on Swimmer's ({{{MUJOCO}/Swimmer/mean/last_100:.0f}} against 111.2),",
        "so no probability of improvement can be drawn): {ratio/HalfCheetah/cleanrl:.1f} times its return on"
        f" HalfCheetah ({pm(MUJOCO + '/HalfCheetah')}"
        f" against 1442 +- 46) and {{ratio/Walker2d/cleanrl:.1f}} times on Walker2d"
        f" ({pm(MUJOCO + '/Walker2d')} against 2288 +- 572); on Hopper ({pm(MUJOCO + '/Hopper')}"
        f" against 2383 +- 272) and Humanoid ({pm(MUJOCO + '/Humanoid')} against 716 +- 49) the means differ"
        " by less than either std (differences {difference/Hopper/cleanrl:.0f} and {difference/Humanoid/cleanrl:.0f}),",
        "of which this project's mean over its last 10 episodes is {ratio/HalfCheetah/cleanrl-here:.1f} times.",
        "return) is {cleanrl/default/iqm:.2f}, 95% stratified-bootstrap interval {cleanrl/default/iqm_ci}"
        " ({cleanrl/default/runs} runs;",
        f"Ant's seeds spread more in training ({runs(MUJOCO + '/Ant', 'last_10', last=AND)} over the last 10"
        f" episodes) and less in evaluation ({runs(MUJOCO + '/Ant', 'eval')}).",
        "the interquartile mean of the {atari/default/runs} runs' last 100 games is {atari/default/iqm:.2f}, 95%"
        " stratified-bootstrap interval {atari/default/iqm_ci} (`tables.py`;",
        f"Breakout climbs all the way in every seed ({runs(ATARI + '/Breakout', 'last_10', '.1f', last=AND)} over"
        f" the last 10 games).",
        f"then rises to the end ({runs(ATARI + '/Pong', 'last_10', '.1f', last=AND)}).",
        f"({runs(ATARI + '/BeamRider', 'last_10', '.1f', last=AND)}, against 363.9 at random). Seed 2's runs took"
        f" {{{ATARI}/seed2/min/minutes:.0f}} to {{{ATARI}/seed2/max/minutes:.0f}} minutes per run on one core of a"
        f" 2-core machine ({{{ATARI}/seed2/min/sps:.0f}} to {{{ATARI}/seed2/max/sps:.0f}} SPS with one thread,",
        f"({{{ATARI}/seed3/min/minutes:.0f}} to {{{ATARI}/seed3/max/minutes:.0f}} minutes each,"
        f" {{{ATARI}/seed3/min/sps:.0f}} to {{{ATARI}/seed3/max/sps:.0f}} SPS, beside",
    ],
    "docs/studies.md": [
        "than a gymnasium one is {reward-scaling/evaluation/p:.2f} {reward-scaling/evaluation/p_ci}"
        " ({reward-scaling/last-200k-steps/p:.2f} {reward-scaling/last-200k-steps/p_ci} over the last 200k steps;",
        "(two runs at a time, {flags/compile/all/min/minutes:.0f} to {flags/compile/all/max/minutes:.0f} minutes each)",
        f"than the defaults (P = {p('table1', 'none')}), as in the paper. On HalfCheetah and Walker2d each of its"
        f" runs ended below each of the defaults' (HalfCheetah {runs('table1/none/HalfCheetah')}; Walker2d"
        f" {runs('table1/none/Walker2d')}), on Hopper its runs ended at {runs('table1/none/Hopper', last=AND)}"
        f" against the defaults' {runs(T1 + '/Hopper', last=AND)};",
        f"Clip 0.1 is worse than clip 0.2 (P = {p('table1', 'clip-0.1')}), as in the paper. Both KL penalties are"
        f" better than clip 0.2 at this budget: fixed KL with beta = 1 (P = {p('table1', 'kl-fixed')}; on Hopper"
        f" each of its runs, {runs('table1/kl-fixed/Hopper', last=AND)}, ended above each of the defaults') and"
        f" adaptive KL (P = {p('table1', 'kl-adaptive')}, the interval's lower end close to 1/2). Clip 0.3 is not"
        f" separated from clip 0.2 (P = {p('table1', 'clip-0.3')}).",
        f"penalty (P = {p(T1M, 'none')}: each of its 9 runs ended below each of the defaults' on its env"
        f" (HalfCheetah {{{T1M}/none/HalfCheetah/min/last_100:.0f}} to {{{T1M}/none/HalfCheetah/max/last_100:.0f}},"
        f" Hopper {{{T1M}/none/Hopper/min/last_100:.0f}} to {{{T1M}/none/Hopper/max/last_100:.0f}}, Walker2d"
        f" {{{T1M}/none/Walker2d/min/last_100:.0f}} to {{{T1M}/none/Walker2d/max/last_100:.0f}}), above the random"
        f" policy, where the paper's scored below it), clip 0.3 (P = {p(T1M, 'clip-0.3')}) and adaptive KL (P ="
        f" {p(T1M, 'kl-adaptive')}). Two are not separated from clip 0.2: fixed KL with beta = 1 (P ="
        f" {p(T1M, 'kl-fixed')}; its seeds spread widely on every env, HalfCheetah"
        f" {{{T1M}/kl-fixed/HalfCheetah/min/last_100:.0f}} to {{{T1M}/kl-fixed/HalfCheetah/max/last_100:.0f}}), and"
        f" clip 0.1 (P = {p(T1M, 'clip-0.1')}), which splits by env: on HalfCheetah its runs win 6 of the 9"
        f" pairings with the defaults' ({runs(T1M + '/clip-0.1/HalfCheetah')} against"
        f" {runs(T1M + '/clip-0.2/HalfCheetah')}), on Walker2d none ({runs(T1M + '/clip-0.1/Walker2d')} against"
        f" {runs(T1M + '/clip-0.2/Walker2d')});",
        "Compiled, the runs learn as the defaults' do: P(better than the defaults) {compile/compile/p:.2f}"
        " {compile/compile/p_ci}, not separated from 1/2. Per env the compiled runs ended HalfCheetah at"
        f" {runs('flags/compile/HalfCheetah', last=AND)} (last 100 episodes; the defaults'"
        f" {runs(T1 + '/HalfCheetah')}), Hopper at {runs('flags/compile/Hopper')} ({runs(T1 + '/Hopper')}) and"
        f" Walker2d at {runs('flags/compile/Walker2d')} ({runs(T1 + '/Walker2d')}):",
        "In bf16 the runs learn as the defaults' do: the last 100 games averaged {flags/bf16/Breakout/1/last_100:.1f}"
        " (seed 1) and {flags/bf16/Breakout/3/last_100:.1f} (seed 3), the defaults' three runs"
        f" {runs(ATARI + '/Breakout', spec='.1f', last=AND)}; one bf16 run is above all three, the other below all"
        " three, so P(better than the defaults) is {bf16/bf16/p:.2f}, half of the six pairs.",
        "Their closing greedy evaluations: {flags/bf16/Breakout/1/eval:.1f} and {flags/bf16/Breakout/3/eval:.1f} (the"
        f" defaults' {runs(ATARI + '/Breakout', 'eval', '.1f')}).",
        f"the defaults' seeds 1-3: HalfCheetah {runs(T1 + '/HalfCheetah')}; Hopper {runs(T1 + '/Hopper')}; Walker2d"
        f" {runs(T1 + '/Walker2d')}), description rather than verdict,",
        "on HalfCheetah each of its 3 runs ended below each of the defaults'"
        f" ({runs(DETAILS + '/init-std-1.0/HalfCheetah')};"
        f" at 1M steps, below, 1760 and 1738 against the defaults' {pm(MUJOCO + '/HalfCheetah', 'last_10')}); on"
        f" Hopper two of its three ended above all of the defaults' ({runs(DETAILS + '/init-std-1.0/Hopper')}); on"
        f" Walker2d {runs(DETAILS + '/init-std-1.0/Walker2d')}. Over the three envs P(better than the defaults) ="
        f" {p(DETAILS, 'init-std-1.0')}.",
        f"on Hopper each of its runs ended above each of the defaults' ({runs(DETAILS + '/clip-vloss/Hopper')}); on"
        f" Walker2d below the defaults' best ({runs(DETAILS + '/clip-vloss/Walker2d')}); on HalfCheetah on both sides"
        f" ({runs(DETAILS + '/clip-vloss/HalfCheetah')}). P = {p(DETAILS, 'clip-vloss')}.",
        f"every episode is cut by the limit, {runs(DETAILS + '/no-bootstrap-truncation/HalfCheetah', last=AND)}; on"
        " Walker2d seed 2,"
        f" {{{DETAILS}/no-bootstrap-truncation/Walker2d/2/last_100:.0f}} against {{{T1}/Walker2d/2/last_100:.0f}}."
        f" P = {p(DETAILS, 'no-bootstrap-truncation')}.",
        f"`NormalizeReward`**: {runs(DETAILS + '/gymnasium-reward-norm/HalfCheetah')} on HalfCheetah and"
        f" {runs(DETAILS + '/gymnasium-reward-norm/Walker2d')} on Walker2d, above and below the defaults' runs;"
        f" {runs(DETAILS + '/gymnasium-reward-norm/Hopper')} on Hopper, within theirs. P ="
        f" {p(DETAILS, 'gymnasium-reward-norm')}.",
        f"(the lowest, {{{DETAILS}/no-grad-clip/Walker2d/min/last_100:.0f}} on Walker2d without gradient clipping,"
        f" against the defaults' {{{T1}/Walker2d/min/last_100:.0f}} to {{{T1}/Walker2d/max/last_100:.0f}} there",
        f"without advantage normalization P(better than the defaults) = {p(DETAILS, 'no-norm-adv')} (its Hopper runs"
        f" {runs(DETAILS + '/no-norm-adv/Hopper')} above each of the defaults', its Walker2d runs"
        f" {runs(DETAILS + '/no-norm-adv/Walker2d')}); without gradient clipping P = {p(DETAILS, 'no-grad-clip')}"
        f" (HalfCheetah {runs(DETAILS + '/no-grad-clip/HalfCheetah')}; Hopper {runs(DETAILS + '/no-grad-clip/Hopper')};"
        f" Walker2d {runs(DETAILS + '/no-grad-clip/Walker2d')}).",
    ],
    "docs/tuning.md": [
        f"at 1M steps their three seeds end at {runs(MUJOCO + '/Swimmer', 'last_10', last=AND)} (last 10 episodes),",
        "| the defaults | {mujoco/default/Swimmer/1/last_100:.1f} | {mujoco/default/Swimmer/2/last_100:.1f} |"
        " {mujoco/default/Swimmer/3/last_100:.1f} | {tuned/default/Swimmer/4/last_100:.1f} |"
        f" {pm('tuned/defaults/Swimmer')} | {pm('tuned/defaults/Swimmer', 'eval')} |",
        "| tuned (trial 37) | {tuned/study/Swimmer/1/last_100:.1f} | {tuned/study/Swimmer/2/last_100:.1f} |"
        " {tuned/study/Swimmer/3/last_100:.1f} | {tuned/study/Swimmer/4/last_100:.1f} |"
        f" {pm('tuned/study/Swimmer')} | {pm('tuned/study/Swimmer', 'eval')} |",
        "P(a tuned run beats a default run) is {tuned/Swimmer/tuned/p:.2f}, 95% stratified-bootstrap interval"
        " {tuned/Swimmer/tuned/p_ci}, and `tables.py` calls the setting {tuned/Swimmer/tuned/verdict} (four",
        "three seeds reached {tuned/study/Swimmer/2/last_100:.0f} to {tuned/study/Swimmer/1/last_100:.0f}, above",
        "and one stayed at {tuned/study/Swimmer/min/last_100:.0f}. Each tuned run took"
        " {tuned/study/Swimmer/min/minutes:.0f} to {tuned/study/Swimmer/max/minutes:.0f} minutes",
    ],
    "docs/benchmarks.md": [
        f"(9 envs x 3 seeds x 1M steps, {{{MUJOCO}/all/min/minutes:.0f}} to {{{MUJOCO}/all/max/minutes:.0f}} minutes"
        " per run on one core)",
    ],
    "docs/choices.md": [
        f"every run with 0.5: {pm(DETAILS + '/init-std-1.0/HalfCheetah')} against {pm(T1 + '/HalfCheetah')} at 300k"
        " steps (3 seeds each),"
        f" 1760 and 1738 against {pm(MUJOCO + '/HalfCheetah', 'last_10')} at 1M steps. Over the three envs of the"
        f" study the two are not separated (P(better than the defaults) = {p(DETAILS, 'init-std-1.0')}):",
        f"on average ({{{MUJOCO}/Hopper/mean/eval:.0f}} against 2470),",
        "(about {atari-10m/default/Breakout/mean/reset_share:.1f}% of Breakout's steps at 10M,"
        " {atari-10m/default/Pong/mean/reset_share:.2f}% of Pong's: one a life lost).",
    ],
}
