"""OpenRLHF's per-step status line (PPO/GRPO trainer):

    INFO 08-13 19:25:45 ppo_trainer.py:547] ✨ Global step 12: {'policy_loss': ..., 'timing/make_experience': 21.3, 'timing/ppo_train': 40.1, 'timing/broadcast': 3.2, 'timing/generation': 95.0, 'timing/step_total': 159.6, ...}

Format: openrlhf/trainer/ppo_trainer.py (`logger.info(f"✨ Global step {global_step}:
{log_status}")`, a Python dict; timing/make_experience, timing/ppo_train, timing/broadcast
set in `train_step`, timing/generation and timing/step_total, the sum of the others, in
`fit`), line prefix from openrlhf/utils/logging_utils.py ("%(levelname)s %(asctime)s
%(filename)s:%(lineno)d] %(message)s")."""
from __future__ import annotations

import re

from rlsolve.runlogs.common import NUMBER, LogStep, clean, to_float

LINE = re.compile(r"Global step (\d+):\s*(\{.*\})\s*$")
PAIR = re.compile(r"'([^']+)':\s*(?:np\.float\d*\()?(" + NUMBER + r")")


def looks_like(text: str) -> bool:
    return "Global step" in text and "'timing/" in text


def parse(text: str) -> list[LogStep]:
    steps = []
    for raw in text.splitlines():
        m = LINE.search(clean(raw))
        if not m:
            continue  # includes a line cut before its closing brace
        values = {k: v for k, s in PAIR.findall(m.group(2)) if (v := to_float(s)) is not None}
        timers = {k[len("timing/"):]: v for k, v in values.items() if k.startswith("timing/")}
        if "step_total" not in timers:
            continue
        metrics = {k: v for k, v in values.items() if not k.startswith("timing/")}
        steps.append(LogStep(step=int(m.group(1)), timers=timers, metrics=metrics))
    return steps
