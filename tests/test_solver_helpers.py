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


def test_still_to_try_as_the_key_test_of_each_try():
    """`_still_to_try` without a target (the variants left at a lighter recompute, grouped by variant) keeps
    the tries whose every critic key is among `left`'s, in order: what the test of each try's keys keeps."""
    from itertools import product

    from rlsolve.solver.candidates import _keys_of, _still_to_try

    rng = random.Random(24)
    hosts = [frozenset(), frozenset({"reference"}), frozenset({"reward"})]
    for _ in range(300):
        variants = [(rng.choice(hosts), rng.choice(("training", "elsewhere")), rng.choice(("none", "fp8")),
                     frozenset({"sync"})) for _ in range(rng.randint(1, 4))]
        ckeys = [rng.choice(((), (i,), (i, "like"), ("like",), (None,))) for i in range(rng.randint(1, 6))]
        kind = rng.choice(("colocated", "disagg"))
        left = {}
        for _ in range(rng.randint(0, 8)):
            v, i = rng.choice(variants), rng.randrange(len(ckeys))
            left[(rng.choice(("colocated", "disagg")),) + v[:3] + (ckeys[i],)] = object()
        tries = list(product(variants, enumerate([object()] * len(ckeys))))
        keys = _keys_of(left)
        want = [] if not any(k[0] == kind for k in keys) else \
            [(v, ic) for v, ic in tries if all((kind,) + v[:3] + (k,) in keys for k in ckeys[ic[0]])]
        assert _still_to_try(kind, iter(tries), ckeys, None, left) == want
