"""The CP-SAT program.

Formulation (all coefficients integers from `scale`: milliseconds, GB, milli-dollars):

Precomputed, per role (candidates.py): a table of scored candidates, one row per legal
layout of that role on a GPU count of a pool, with every number the step needs (time,
weight-sync terms, memory held or spared during rollout, hosted models). The performance
model is non-linear in the degrees (ring collectives, bubbles, the decode simulation), so it
is evaluated in Python once per row instead of being linearised.

Variables:
- `gen[i]`, `train[j]`, `aux[k]`: one Boolean per table row; exactly one generation and one
  training row, at most one auxiliary row;
- `mode[m]`: one Boolean per allowed pipeline mode, exactly one true;
- integer *degree* variables per role, `gen.tp, gen.pp, gen.dp, gen.ep, gen.gpus,
  train.tp, train.pp, train.dp, train.cp, train.ep, train.vp, train.zero_stage,
  train.micro_batch, train.gpus`, and `gpus` (all GPUs used): each is linked to its table by
  an element constraint (value = sum of row value x row Boolean), so a user's restriction
  (`constraints.linear`: "generation.gpus >= 2 * training.gpus", "training.tp <= 4") is a
  linear constraint on them;
- `step` (ms), `gpus_used`, and for the cost objective `rate` (milli-dollars per hour) and
  `cost` = rate x step.

Constraints, one module each: world (one row per role, roles of the chosen mode, colocated roles on the same
pool and count, GPUs per pool: engines, trainers and an auxiliary group of that pool, a colocated pair counted
once), modes (a chosen row implies a mode the target runs its placements in: row => mode in row.modes), degrees
(the element links and the user's linear constraints), groups (an auxiliary group the target runs with the
actor's degrees sits beside a trainer of that tp, and never beside one the rule table refuses it with:
precomputed pairs), memory (colocated: what training keeps during rollout fits the KV budget its generation row
was scored with), placement (each reference/reward model in exactly one place), pipeline (the step of the
chosen mode, `perf.step.compose_step`, with the trainers' refit gather in their time and, for async engines
that wait for it, in theirs: `refit_hold`; enforced by the mode's literal, and implied as bounds that hold in
every mode for the LP relaxation), price (the budget).

Objective: throughput minimizes the step (tokens per step are fixed), then GPUs used, then a
simplicity penalty; cost minimizes rate x step."""
from __future__ import annotations

from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from rlsolve.perf.step import compose_step
from rlsolve.solver.candidates import Candidates, GenCand, TrainCand
from rlsolve.solver.scale import time_units

DISAGG = ("sync", "async")
GEN_DEGREES = ("tp", "pp", "dp", "ep")
TRAIN_DEGREES = ("tp", "pp", "dp", "cp", "ep", "vp", "zero_stage", "micro_batch")


@dataclass
class Vars:
    gen: dict[int, cp_model.IntVar]
    train: dict[int, cp_model.IntVar]
    aux: dict[int, cp_model.IntVar]
    mode: dict[str, cp_model.IntVar]
    step: cp_model.IntVar
    gpus_used: cp_model.IntVar
    degrees: dict[str, cp_model.IntVar] = field(default_factory=dict)   # "generation.tp", "training.gpus", "gpus"
    extra: dict = field(default_factory=dict)


class Program:
    """`pool_gpus[p]`: GPUs of pool p; `pool_price_milli[p]`: its price per GPU-hour in
    thousandths of a dollar; `budget_milli`: the price cap per hour (None: no cap);
    `linear`: the user's linear constraints (rlsolve.linear.LinearConstraint)."""

    def __init__(self, cands: Candidates, modes: list[str], pool_gpus: list[int], aux_models: list[str],
                 pool_price_milli: list[int] | None = None, budget_milli: int | None = None,
                 linear: list | None = None, one_pool: bool = False, aux_apart: frozenset = frozenset()):
        self.cands, self.modes, self.aux_models = cands, modes, aux_models
        # (auxiliary row id, training row id) that the rule table refuses together (rules.aux_group_violations)
        self.aux_apart = aux_apart
        self.one_pool = one_pool  # every chosen role on one pool (rules.one_pool)
        self.pool_gpus = pool_gpus
        self.n_gpus = sum(pool_gpus)
        self.price = pool_price_milli or [1] * len(pool_gpus)
        self.budget = budget_milli
        self.linear = linear or []
        self.m = cp_model.CpModel()
        self.v = self._variables()
        for module in (self._world, self._modes, self._degrees, self._groups, self._memory, self._placement,
                       self._pipeline, self._price):
            module()

    # --- variables -------------------------------------------------------------------------
    def _variables(self) -> Vars:
        m = self.m
        gen = {c.id: m.new_bool_var(f"gen[{c.id}]") for c in self.cands.gen}
        train = {c.id: m.new_bool_var(f"train[{c.id}]") for c in self.cands.train}
        aux = {c.id: m.new_bool_var(f"aux[{c.id}]") for c in self.cands.aux}
        mode = {k: m.new_bool_var(f"mode[{k}]") for k in self.modes}
        horizon = max([time_units(c.time) for c in self.cands.gen] + [1]) + \
            max([time_units(c.time) for c in self.cands.train] + [1]) + \
            max([time_units(c.time) for c in self.cands.aux] + [0]) + \
            max([time_units(c.sync) for c in self.cands.gen] + [time_units(c.send) for c in self.cands.train] + [1]) + \
            max([time_units(c.hold) for c in self.cands.train] + [0]) + 1
        self.horizon = horizon
        step = m.new_int_var(0, horizon, "step_ms")
        used = m.new_int_var(0, self.n_gpus, "gpus_used")
        return Vars(gen, train, aux, mode, step, used)

    # --- modules ---------------------------------------------------------------------------
    def _world(self) -> None:
        """One candidate per role, one mode, both roles of that mode; colocated roles on the
        same pool and GPU count; every pool's GPUs suffice."""
        m, v, c = self.m, self.v, self.cands
        m.add_exactly_one(v.gen.values())
        m.add_exactly_one(v.train.values())
        m.add_exactly_one(v.mode.values())
        m.add_at_most_one(v.aux.values())
        coloc = v.mode.get("colocated")
        disagg = [v.mode[k] for k in DISAGG if k in v.mode]
        for side, cands in ((v.gen, c.gen), (v.train, c.train)):
            m.add(sum(side[x.id] for x in cands if x.mode == "colocated") == (coloc if coloc is not None else 0))
            m.add(sum(side[x.id] for x in cands if x.mode == "disagg") == sum(disagg))
        for p, n in enumerate(self.pool_gpus):
            for count in {x.gpus for x in c.train if x.mode == "colocated" and x.pool == p}:
                m.add(sum(v.gen[x.id] for x in c.gen if x.mode == "colocated" and x.pool == p and x.gpus == count) ==
                      sum(v.train[x.id] for x in c.train if x.mode == "colocated" and x.pool == p and x.gpus == count))
            m.add(self._gpus(p) <= n)
        m.add(v.gpus_used == sum(self._gpus(p) for p in range(len(self.pool_gpus))))
        if self.one_pool:  # the target runs every role on one pool (rules.one_pool)
            on = [m.new_bool_var(f"pool[{p}]") for p in range(len(self.pool_gpus))]
            m.add_exactly_one(on)
            for side, cands in ((v.gen, c.gen), (v.train, c.train), (v.aux, c.aux)):
                for x in cands:
                    m.add_implication(side[x.id], on[x.pool])

    def _modes(self) -> None:
        """A chosen candidate implies a mode the target runs what it hosts in (its `modes`)."""
        m, v, c = self.m, self.v, self.cands
        for rows, cands in ((v.gen, c.gen), (v.train, c.train), (v.aux, c.aux)):
            for x in cands:
                if x.modes is None:
                    continue
                for mode, on in v.mode.items():
                    if mode not in x.modes:
                        m.add_implication(rows[x.id], on.Not())

    def _gpus(self, p: int):
        """GPUs used in pool p (a colocated pair counts once). The sum is the whole rule: each group's
        count is a divisor of the node size or whole nodes (`role_counts`), and at most three groups
        share a pool (engines, trainers, one auxiliary group), so any sum within the pool packs onto
        its nodes (groups below a node hold at most half of one: two of them always share a node)."""
        v, c = self.v, self.cands
        return (sum(x.gpus * v.gen[x.id] for x in c.gen if x.pool == p) +
                sum(x.gpus * v.train[x.id] for x in c.train if x.pool == p and x.mode == "disagg") +
                sum(x.gpus * v.aux[x.id] for x in c.aux if x.pool == p))

    def _degrees(self) -> None:
        """Integer degree variables, each the element of its role's table picked by the
        one-hot row Booleans, and the user's linear constraints over them."""
        m, v, c = self.m, self.v, self.cands
        tables = [("generation", v.gen, c.gen, lambda x: x.layout, GEN_DEGREES),
                  ("training", v.train, c.train, lambda x: x.layout, TRAIN_DEGREES)]
        for role, rows, cands, lay, names in tables:
            for name in names + ("gpus",):
                # a role's own GPUs (a trainer's `gpus` also counts its critic group's, which is not training.gpus)
                get = (lambda x: x.side.gpus) if name == "gpus" else (lambda x, n=name: getattr(lay(x), n))
                values = [get(x) for x in cands] or [0]
                var = m.new_int_var(min(values + [0]), max(values), f"{role}.{name}")
                m.add(var == sum(get(x) * rows[x.id] for x in cands))
                v.degrees[f"{role}.{name}"] = var
        v.degrees["gpus"] = v.gpus_used
        for lc in self.linear:
            lhs = sum(coef * v.degrees[name] for name, coef in lc.terms.items())
            {"<=": lambda: m.add(lhs <= lc.bound), ">=": lambda: m.add(lhs >= lc.bound),
             "==": lambda: m.add(lhs == lc.bound)}[lc.op]()

    def _groups(self) -> None:
        """An auxiliary group the target runs with the actor's degrees (`actor_tp`) goes only beside a
        trainer of that tp, and never beside one of `aux_apart` (the rule table's pairs it refuses)."""
        m, v, c = self.m, self.v, self.cands
        for a in c.aux:
            if a.actor_tp is None:
                continue
            m.add(v.degrees["training.tp"] == a.actor_tp).only_enforce_if(v.aux[a.id])
        for a, x in self.aux_apart:
            m.add_bool_or([v.aux[a].Not(), v.train[x].Not()])

    def _price(self) -> None:
        """Dollars per hour of the GPUs used (thousandths), for the cost objective and the budget."""
        m, v = self.m, self.v
        self.rate_top = top = sum(n * pr for n, pr in zip(self.pool_gpus, self.price))
        v.extra["rate"] = rate = m.new_int_var(0, top, "rate_milli_usd_per_h")
        m.add(rate == sum(self.price[p] * self._gpus(p) for p in range(len(self.pool_gpus))))
        if self.budget is not None:
            m.add(rate <= self.budget)

    def _memory(self) -> None:
        """Colocated: what training keeps on the GPU during rollout must fit the KV budget the
        generation candidate was scored with."""
        m, v, c = self.m, self.v, self.cands
        held = sum(x.reserved_gb * v.train[x.id] for x in c.train if x.mode == "colocated")
        budget = sum(x.reserved_gb * v.gen[x.id] for x in c.gen if x.mode == "colocated")
        m.add(held <= budget)

    def _placement(self) -> None:
        """Each reference/reward model runs in exactly one place (training GPUs, engines, or an
        auxiliary group); the reward quantization is the one its host was scored with."""
        m, v, c = self.m, self.v, self.cands
        for a in self.aux_models:
            m.add(sum(v.gen[x.id] for x in c.gen if a in x.hosts) +
                  sum(v.train[x.id] for x in c.train if a in x.hosts) +
                  sum(v.aux[x.id] for x in c.aux if a in x.hosts) == 1)

    def _pipeline(self) -> None:
        """The step of the chosen mode, by the composition the performance model uses."""
        m, v, c = self.m, self.v, self.cands
        tg = sum(time_units(x.time) * v.gen[x.id] for x in c.gen)
        # forwards on an auxiliary group sit between generation and training
        tt = sum(time_units(x.time) * v.train[x.id] for x in c.train) + \
            sum(time_units(x.time) * v.aux[x.id] for x in c.aux)
        recv = sum(time_units(x.sync) * v.gen[x.id] for x in c.gen if x.mode == "disagg")
        send = sum(time_units(x.send) * v.train[x.id] for x in c.train if x.mode == "disagg")
        # the trainers' refit gather is in their time; async engines wait for it too (perf.step.refit_hold)
        hold = sum(time_units(x.hold) * v.train[x.id] for x in c.train if x.mode == "disagg" and x.hold)
        for mode, on in v.mode.items():
            m.add(v.step >= compose_step(mode, tg, tt, recv, send, hold=hold, maximum=self._max)).only_enforce_if(on)
        # The same steps as bounds that hold whatever the mode, for the LP relaxation (an enforced constraint
        # relaxes to nearly nothing): the colocated step over the colocated rows only (in another mode those
        # are 0 and it reads step >= the auxiliary group's forwards, which every mode pays), and the async
        # step over the disaggregated rows only (colocated, it reads the same; a sync step is never below the
        # async step of its rows: its terms are the async ones' sum, and the hold is part of the trainers'
        # time). Implied by the enforced ones, so the optimum and the plans are the same; proofs are faster.
        aux = sum(time_units(x.time) * v.aux[x.id] for x in c.aux)
        if "colocated" in v.mode:
            m.add(v.step >= compose_step(
                "colocated", sum(time_units(x.time) * v.gen[x.id] for x in c.gen if x.mode == "colocated"),
                sum(time_units(x.time) * v.train[x.id] for x in c.train if x.mode == "colocated") + aux, 0, 0))
        if any(k in v.mode for k in DISAGG):
            m.add(v.step >= compose_step(
                "async", sum(time_units(x.time) * v.gen[x.id] for x in c.gen if x.mode == "disagg"),
                sum(time_units(x.time) * v.train[x.id] for x in c.train if x.mode == "disagg") + aux,
                recv, send, hold=hold, maximum=self._max))

    def _max(self, *exprs):
        """A variable at least each expression. compose_step uses its maxima only where the
        step grows with them, so under minimization this bound is the max itself, and the
        LP relaxation stays linear (a max-equality made proofs ~100x slower)."""
        top = 2 * self.horizon
        var = self.m.new_int_var(-top, top, "max")
        for e in exprs:
            self.m.add(var >= e)
        return var

    # --- objective -------------------------------------------------------------------------
    def minimize_step(self) -> None:
        """Throughput: tokens per step are fixed, so minimize the step time; among equal step
        times (1 ms) prefer fewer GPUs, then simpler candidates (lower ids are simpler)."""
        v = self.v
        n = self.n_gpus + 1
        simplicity = sum(self._penalty(x) * v.train[x.id] for x in self.cands.train) + \
            sum(self._penalty_gen(x) * v.gen[x.id] for x in self.cands.gen) + \
            sum(min(31, 2 + {"none": 0, "int8": 1, "int4": 2}[x.reward_quant]) * v.aux[x.id] for x in self.cands.aux)
        self.objective = v.step * (n * 128) + v.gpus_used * 128 + simplicity  # simplicity < 128
        self.m.minimize(self.objective)

    @staticmethod
    def _penalty(x: TrainCand) -> int:
        L = x.layout
        return min(31, L.zero_stage + {"none": 0, "selective": 1, "full": 2}[L.recompute] + (L.vp > 1)
                   + x.offload_states + (x.reference == "cpu_offload") + {"none": 0, "int8": 1, "int4": 2}[x.reward_quant])

    @staticmethod
    def _penalty_gen(x: GenCand) -> int:
        return min(31, {"none": 0, "int8": 1, "int4": 2}[x.reward_quant] + len(x.hosts) + (x.layout.ep > 1))

    def minimize_cost(self) -> None:
        """Cost: dollars per trained token is (price per hour of the GPUs used) x (step time)
        / tokens per step; the tokens are fixed, so minimize the product."""
        v = self.v
        rate = v.extra["rate"]
        top = self.rate_top * self.horizon
        cost = self.m.new_int_var(0, max(top, 1), "cost")
        self.m.add_multiplication_equality(cost, [rate, v.step])
        v.extra["cost"] = cost
        self.objective = cost
        self.m.minimize(cost)

    def forbid(self, gen_id: int, train_id: int) -> None:
        """No-good cut: exclude one (generation, training) pair (for runner-up plans)."""
        self.m.add_bool_or([self.v.gen[gen_id].Not(), self.v.train[train_id].Not()])


def run(program: Program, time_limit_s: float, workers: int, deterministic: bool,
        deterministic_time: float | None = None, fixed: tuple = ()) -> tuple[cp_model.CpSolver, int]:
    """Solve. Deterministic mode: a fixed seed, then a second solve that fixes the optimal
    objective and picks the lowest-numbered optimal pair, so the plan never depends on which
    worker thread finished first (CP-SAT's own parallel search is not reproducible).
    `deterministic_time`: also stop after this much of CP-SAT's deterministic time, a limit
    that, unlike the wall clock, gives the same answer under any load. `fixed`: Booleans of the
    program solved as true, by constraints on a copy of the model, which presolve uses to drop
    every row they exclude (an assumption only prunes the search: 16,384 GPUs x 3 pools' best
    plans of the other modes took 4x the deterministic time under assumptions)."""
    solver = _solver(time_limit_s, workers)
    if deterministic_time is not None:
        solver.parameters.max_deterministic_time = deterministic_time
    model = program.m
    if fixed:
        model = program.m.clone()  # (the same variable indices: the program's variables read its solution)
        model.add_bool_and([model.get_bool_var_from_proto_index(x.index) for x in fixed])
    status = solver.solve(model)
    if not deterministic or status != cp_model.OPTIMAL:
        return solver, status
    best = int(round(solver.objective_value))
    m = model.clone()
    obj = program.objective
    m.clear_objective()
    m.add(obj == best)
    v = program.v
    n_aux = len(v.aux) + 1  # "no auxiliary group" ranks first
    n_train = len(v.train) * n_aux
    # ties: fewer GPUs first, then the lowest-numbered (simplest) candidates
    m.minimize(v.gpus_used * (len(v.gen) * n_train + 1) + sum(i * n_train * var for i, var in v.gen.items())
               + sum(i * n_aux * var for i, var in v.train.items()) + sum((i + 1) * var for i, var in v.aux.items()))
    tie = _solver(time_limit_s, workers)
    if deterministic_time is not None:
        tie.parameters.max_deterministic_time = deterministic_time
    status2 = tie.solve(m)
    if status2 != cp_model.OPTIMAL:
        return solver, status
    return _Fixed(tie, solver, program, m), status


class _Fixed:
    """Values from the tie-break solve, objective and bound from the main one."""

    def __init__(self, tie: cp_model.CpSolver, main: cp_model.CpSolver, program: Program, model: cp_model.CpModel):
        self._tie, self._main = tie, main
        self.objective_value = main.objective_value
        self.best_objective_bound = main.best_objective_bound
        self.deterministic_time = main.deterministic_time + tie.deterministic_time

    def value(self, var):
        return self._tie.value(var)

    def status_name(self, status):
        return self._main.status_name(status)


def _solver(time_limit_s: float, workers: int) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    p = solver.parameters
    p.num_workers = workers
    p.random_seed = 7
    p.max_time_in_seconds = max(time_limit_s, 0.001)
    # one presolve pass: the tables are one-hot rows that the first pass already reduces; the repeated
    # passes re-probed every Boolean (16,384 GPUs x 3 pools: 0.33 s of presolve before a 0.14 s search)
    p.max_presolve_iterations = 1
    # nor probing: on these models it fixes a Boolean or two at half the presolve's cost (16,384 GPUs x 3 pools:
    # 44 of 90 ms per runner-up solve); every solve of the examples and scale rows reaches the same optimum without it
    p.cp_model_probing_level = 0
    return solver
