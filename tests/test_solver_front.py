"""The colocated fronts of the training enumeration (`candidates._Front`): bisection over the sorted ranks
and the least memory of each prefix answer what a scan of every member answers."""
import random

from rlsolve.solver.candidates import _Front


def _scan(members: list[tuple], rank: tuple) -> bool:
    # the rule itself: a member holding no more memory that comes no later in (time, memory, simplicity)
    return any(k[1] <= rank[1] and k <= rank for k in members)


def _rank(rng: random.Random) -> tuple:
    # (time units, memory units, simplicity: ZeRO stage, recompute, vp, -micro-batch, offload), with ties
    return (rng.randint(0, 30), rng.randint(0, 30),
            (rng.randint(0, 3), rng.randint(0, 2), rng.choice((1, 2)), -rng.choice((1, 2, 4)), rng.random() < 0.5))


def test_front_covers_as_a_scan_of_its_members():
    rng = random.Random(13)
    for _ in range(300):
        front, members = _Front(), []
        for _ in range(rng.randint(0, 40)):
            rank = _rank(rng)
            assert front.covers(rank) == _scan(members, rank)
            if rng.random() < 0.6:  # (the enumeration adds only what no member covers; any order must hold)
                front.add(rank)
                members.append(rank)
            assert front.least == [min(k[1] for k in front.ranks[:j + 1]) for j in range(len(front.ranks))]
        for _ in range(50):
            rank = _rank(rng)
            assert front.covers(rank) == _scan(members, rank)
