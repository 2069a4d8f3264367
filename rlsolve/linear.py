"""The user's linear constraints over the plan's integer decisions.

`constraints.linear` takes lines such as "generation.gpus >= 2 * training.gpus",
"training.tp <= 4" or "generation.gpus + training.gpus <= 48". Each side is a sum of integer
multiples of the variables below (and integers); the comparison is <=, >=, ==, < or >. The
solver adds each as one linear constraint on its degree variables (solver/program.py)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from rlsolve.errors import did_you_mean

VARIABLES = tuple([f"generation.{k}" for k in ("gpus", "tp", "pp", "dp", "ep")] +
                  [f"training.{k}" for k in ("gpus", "tp", "pp", "dp", "cp", "ep", "vp", "zero_stage", "micro_batch")] +
                  ["gpus"])
_TERM = re.compile(r"^(?:(\d+)\s*\*\s*)?([a-z_][a-z_.]*)(?:\s*\*\s*(\d+))?$|^(\d+)$")
_OPS = ("<=", ">=", "==", "<", ">")


@dataclass(frozen=True)
class LinearConstraint:
    """sum(coef x variable) <op> bound, with op one of <=, >=, ==."""

    text: str
    terms: dict
    op: str
    bound: int

    def holds(self, values: dict[str, int]) -> bool:
        lhs = sum(c * values[name] for name, c in self.terms.items())
        return {"<=": lhs <= self.bound, ">=": lhs >= self.bound, "==": lhs == self.bound}[self.op]


def _side(text: str, sign: int, terms: dict[str, int]) -> int:
    """Add the variable terms of one side to `terms` (times sign); return its constant."""
    const = 0
    expr = text.strip()
    if not expr:
        raise ValueError("a side of the comparison is empty")
    parts = re.split(r"\s*([+-])\s*", expr)
    if parts[0] == "":
        parts = parts[1:]
    else:
        parts = ["+"] + parts
    for op, term in zip(parts[::2], parts[1::2]):
        s = sign * (1 if op == "+" else -1)
        m = _TERM.match(term.strip())
        if not m:
            raise ValueError(f"cannot read the term {term!r}; write terms as 'name', 'k * name' or an integer")
        if m.group(4) is not None:
            const += s * int(m.group(4))
            continue
        name = m.group(2)
        if name not in VARIABLES:
            raise ValueError(f"unknown variable {name!r}; {did_you_mean(name, VARIABLES)}")
        coef = int(m.group(1) or 1) * int(m.group(3) or 1)
        terms[name] = terms.get(name, 0) + s * coef
    return const


def parse_linear(text: str) -> LinearConstraint:
    """Parse one constraint; ValueError names what is wrong and how to write it."""
    if not isinstance(text, str) or len(text) > 500:
        raise ValueError("write each linear constraint as a string of at most 500 characters, "
                         "e.g. 'generation.gpus >= 2 * training.gpus'")
    found = [op for op in _OPS if op in text]
    op = found[0] if found else None
    if op is None or text.count(op) != 1:
        raise ValueError(f"{text!r} needs exactly one comparison (<=, >=, ==, <, >), "
                         "e.g. 'generation.gpus >= 2 * training.gpus'")
    left, right = text.split(op)
    terms: dict[str, int] = {}
    c_left = _side(left, 1, terms)
    c_right = _side(right, -1, terms)
    terms = {k: v for k, v in terms.items() if v}
    if not terms:
        raise ValueError(f"{text!r} names no variable; use {', '.join(VARIABLES)}")
    bound = -(c_left + c_right)  # left - right <op> 0, the constants moved to the right-hand side
    if op == "<":
        op, bound = "<=", bound - 1
    elif op == ">":
        op, bound = ">=", bound + 1
    return LinearConstraint(text=text, terms=terms, op=op, bound=bound)
