"""Print the capability catalog as Markdown tables, one per framework release, each cell with its
source (docs/export.md holds this output): python -m rlsolve.frameworks.table"""
from __future__ import annotations

from rlsolve.frameworks.catalog import FrameworkCaps, _catalog


def _cell(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "-"
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_cell(v)}" for k, v in value.items())
    if hasattr(value, "model_dump"):
        return _cell(value.model_dump())
    return str(value)


def rows(caps: FrameworkCaps) -> list[tuple[str, str, str]]:
    out = [("modes", _cell(caps.modes.value), caps.modes.source)]
    for mode, pl in caps.placements.items():
        out.append((f"placements ({mode})", _cell(pl.value), pl.source))
    for name, eng in caps.engines.value.items():
        out.append((f"rollout engine {name}", _cell(eng), caps.engines.source))
    for name, st in caps.training.value.items():
        out.append((f"training {name}", _cell(st), caps.training.source))
    if caps.critic_training is not None:
        for name, st in caps.critic_training.value.items():
            out.append((f"critic training {name}", _cell(st), caps.critic_training.source))
        out.append(("critic training engine of its own", _cell(caps.critic_training.own_engine),
                    caps.critic_training.source))
    for field in ("reward_quantization", "reference_offload", "train_offload_during_rollout", "auxiliary_models",
                  "heterogeneous_pools", "refit", "critic_group_concurrent", "lora", "algorithms", "shapes"):
        entry = getattr(caps, field)
        value = _cell(entry.value)
        if field == "auxiliary_models":
            value += f" (at most {entry.max_models} per group)"
        out.append((field.replace("_", " "), value, entry.source))
    return out


def markdown() -> str:
    parts = []
    for name, caps in _catalog().frameworks.items():
        parts.append(f"### {name} {caps.release}\n\n| capability | value | source |\n|---|---|---|")
        for cap, value, source in rows(caps):
            parts.append(f"| {cap} | {value.replace('|', '/')} | {source.replace('|', '/')} |")
        parts.append("")
    return "\n".join(parts)


if __name__ == "__main__":
    print(markdown())
