"""SGLang 0.5: `python3 -m sglang.launch_server` arguments for the plan's rollout engines (the
generation side only).

`--tp-size`/`--pp-size` per replica, `--dp-size` replicas, `--ep-size` for MoE experts (a TP group
of ep GPUs with `--attn-dp-size` attention-DP ranks holds ep/tp of the plan's replicas). When a
replica fits in a node, each generation node runs one server with its share of the replicas;
a replica that spans nodes is one server over `--nnodes` nodes (`--node-rank`, `--dist-init-addr`).
`--mem-fraction-static` is SGLang's own fraction: the plan's weights + KV pool per GPU over its memory.
Every flag exists in SGLang 0.5.23's server arguments (`sglang/srt/arg_groups/fields/*.py`
dataclass fields, `--` + field name with `-` or an explicit `Arg(cli_name/aliases)`).
"""
from __future__ import annotations

from rlsolve.errors import InfeasibleError
from rlsolve.solver.estimate import estimate
from rlsolve.export.common import (PINS, ExportResult, Job, Section, comment_block, header_lines, render_array,
                                   warning_lines)

PIN = PINS["sglang"]
DIST_PORT = 50000


def layout(job: Job) -> dict:
    """How the plan's replicas become SGLang servers. With expert parallelism (ep = tp x k), k replicas
    form one TP group of ep GPUs with k attention-DP ranks (SGLang's DeepSeek-style layout)."""
    g, gen = job.g, job.gen
    k = g.ep // g.tp if g.ep > 1 and g.ep % g.tp == 0 and g.dp % (g.ep // g.tp) == 0 else 1
    group = g.tp * k * g.pp  # GPUs of one SGLang engine (TP group)
    if group <= gen.gpus_per_node:
        servers = gen.nodes
        return {"spans_nodes": False, "servers": servers, "dp": max(1, g.dp // k // servers), "nnodes": 1, "attn": k}
    return {"spans_nodes": True, "servers": g.dp // k, "dp": 1, "nnodes": -(-group // gen.gpus_per_node), "attn": k}


def static_fraction(job: Job) -> float:
    """SGLang's --mem-fraction-static: the share of GPU memory for the model weights and the KV-cache
    pool ("The fraction of the memory used for static allocation (model
    weights and KV cache memory pool)", sglang/srt/arg_groups/fields/schedule.py), unlike vLLM's gpu_memory_utilization, which also covers
    activations and the engine's other buffers. Weights and KV per GPU come from re-scoring the plan."""
    try:
        mem = estimate(job.spec, job.lay).memory_gb_per_gpu.generation
    except InfeasibleError as e:
        job.notes.warn(f"the layout does not fit ({'; '.join(e.reasons)}): --mem-fraction-static is the plan's "
                       f"gpu_memory_utilization, which by SGLang's definition leaves too little for activations")
        return job.opt.gpu_memory_utilization or 0.9
    return round((mem.weights + mem.kv_cache) / mem.capacity, 3)


def sections(job: Job) -> list[Section]:
    notes, g = job.notes, job.g
    lay = layout(job)
    if (g.dp // lay["attn"]) % lay["servers"]:
        notes.warn(f"{g.dp} replicas do not spread evenly over {lay['servers']} generation nodes")
    if job.engine != "sglang":
        notes.note(f"the plan's engine is {job.engine}; these are the SGLang arguments of the same layout")
    secs: list[Section] = []
    s = Section("parallelism of the rollout engines")
    k = lay["attn"]
    if k > 1:
        s.add("--tp-size", g.tp * k, f"one TP group of ep={g.ep} GPUs ...")
        s.add("--attn-dp-size", k, f"... holding {k} of the plan's replicas as attention-DP ranks (tp {g.tp} each)")
    else:
        s.add("--tp-size", g.tp)
    s.add("--pp-size", g.pp)
    s.add("--dp-size", lay["dp"], "engine replicas in this server" if k == 1 else "TP groups in this server")
    if g.ep > 1:
        if k > 1:
            s.add("--ep-size", g.ep, "expert parallel (MoE)")
        else:
            notes.warn(f"rollout ep={g.ep} is not expressible in SGLang with tp={g.tp} and {g.dp} replicas (ep must "
                       f"be tp x k attention-DP ranks): experts are sharded by TP")
    if lay["spans_nodes"]:
        s.add("--nnodes", lay["nnodes"], "one engine spans these nodes")
    secs.append(s)

    s = Section("memory and scheduling")
    frac = static_fraction(job)
    s.add("--mem-fraction-static", frac, "SGLang's static pool: model weights + KV cache per GPU (activations, "
          "CUDA graphs and the runtime stay outside it), from the plan")
    s.add("--max-running-requests", job.max_num_seqs() * k,
          "per engine" + (f" (SGLang divides it over the {k} attention-DP ranks)" if k > 1 else " replica"))
    s.add("--context-length", job.max_len, "prompt + response")
    if job.colocated:
        s.flag("--enable-memory-saver", comment="colocated: the trainer releases/resumes the engine's memory")
    secs.append(s)
    return secs


def export(job: Job) -> ExportResult:
    secs = sections(job)
    model = job.model_id("policy")
    head = header_lines(PIN, job, "`python3 -m sglang.launch_server` arguments (generation side only)")
    head.append("The training side is not part of this file: export it with --to verl, openrlhf, megatron "
                "or deepspeed.")
    lay = layout(job)
    if lay["spans_nodes"]:
        head.append(f"Each engine replica spans {lay['nnodes']} nodes: run {lay['servers']} server(s); on every node "
                    f"set NODE_RANK (its rank within its server) and HEAD_ADDR (its server's first node).")
    elif lay["servers"] > 1:
        head.append(f"Run one server on each of the {lay['servers']} generation nodes.")
    text = "#!/usr/bin/env bash\n" + comment_block(head + warning_lines(job.notes)) + "set -euo pipefail\n"
    text += f"SERVERS={lay['servers']}  # independent sglang servers\n"
    text += render_array("SGLANG_ARGS", secs, "argparse")
    if lay["spans_nodes"]:
        text += (f"NODE_ARGS=(--node-rank \"${{NODE_RANK:-0}}\" --dist-init-addr "
                 f"\"${{HEAD_ADDR:-127.0.0.1}}:{DIST_PORT}\")\n")
    else:
        text += "NODE_ARGS=()\n"
    text += f'python3 -m sglang.launch_server --model-path {model} "${{SGLANG_ARGS[@]}}" "${{NODE_ARGS[@]}}" "$@"\n'
    return ExportResult(text=text, warnings=list(job.notes.warnings), filename="sglang_server.sh", target="sglang",
                        framework=PIN.label)
