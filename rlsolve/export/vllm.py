"""vLLM 0.33: `vllm serve` arguments for the plan's rollout engines (the generation side only).

Engine replicas are vLLM data-parallel ranks when a replica fits in a node (one server over all
generation nodes, `--headless` on the secondary nodes); a replica that spans nodes is its own
multi-node server (`--nnodes`), one per replica. vLLM has no expert-parallel size: with
`--enable-expert-parallel` the EP size is TP x DP. `--gpu-memory-utilization` is the plan's
engine memory fraction (weights + KV cache + overhead, per GPU). Every flag exists in vLLM 0.33.0's
`vllm/engine/arg_utils.py` or `vllm/entrypoints/common/cli_args.py`.
"""
from __future__ import annotations

from rlsolve.export.common import (PINS, ExportResult, Job, Section, comment_block, header_lines, render_array,
                                   warning_lines)

PIN = PINS["vllm"]
DP_RPC_PORT = 13345


def layout(job: Job) -> dict:
    """How the plan's replicas become vLLM servers."""
    g, gen = job.g, job.gen
    replica = g.tp * g.pp
    if replica <= gen.gpus_per_node:
        local = max(1, gen.per_node // replica)
        return {"spans_nodes": False, "servers": 1, "dp": g.dp, "local": local, "nodes": gen.nodes,
                "nodes_per_server": gen.nodes}
    k = -(-replica // gen.gpus_per_node)
    return {"spans_nodes": True, "servers": g.dp, "dp": 1, "local": 1, "nodes": gen.nodes, "nodes_per_server": k}


def sections(job: Job) -> tuple[list[Section], dict]:
    notes, g, opt = job.notes, job.g, job.opt
    lay = layout(job)
    if job.engine != "vllm":
        notes.note(f"the plan's engine is {job.engine}; these are the vLLM arguments of the same layout")
    secs: list[Section] = []
    s = Section("parallelism of the rollout engines")
    s.add("--tensor-parallel-size", g.tp)
    s.add("--pipeline-parallel-size", g.pp)
    s.add("--data-parallel-size", lay["dp"], "engine replicas in this server")
    if g.ep > 1:
        s.flag("--enable-expert-parallel", comment=f"EP size = TP x DP = {g.tp * lay['dp']}")
        if g.ep != g.tp * lay["dp"]:
            notes.warn(f"vLLM has no expert-parallel size: with --enable-expert-parallel the EP group is "
                       f"TP x DP = {g.tp * lay['dp']}, not the plan's ep={g.ep}")
    if lay["spans_nodes"]:
        s.add("--nnodes", lay["nodes_per_server"], "one replica spans these nodes")
        s.add("--distributed-executor-backend", "mp")
    secs.append(s)

    s = Section("memory and scheduling")
    util = job.memory_fraction("vLLM", "0.92")
    if util is not None:
        s.add("--gpu-memory-utilization", util, "weights + KV cache + engine overhead, from the plan")
    if opt.kv_cache_gb is not None:
        notes.note(f"the plan's KV budget is {opt.kv_cache_gb:.2f} GB per GPU; to pin it exactly instead of the "
                   f"fraction, use --kv-cache-memory-bytes {int(opt.kv_cache_gb * 1e9)}")
    s.add("--max-num-seqs", job.max_num_seqs())
    s.add("--max-model-len", job.max_len, "prompt + response")
    s.flag("--enable-prefix-caching", comment="samples of a prompt share its prefill")
    if job.colocated:
        s.flag("--enable-sleep-mode", comment="colocated: the trainer sleeps/wakes the engine around training")
    secs.append(s)
    return secs, lay


def export(job: Job) -> ExportResult:
    secs, lay = sections(job)
    model = job.model_id("policy")
    head = header_lines(PIN, job, "`vllm serve` arguments for the rollout engines (generation side only)")
    head.append("The training side is not part of this file: export it with --to verl, openrlhf, megatron "
                "or deepspeed.")
    if lay["spans_nodes"]:
        head.append(f"Each engine replica spans {lay['nodes_per_server']} nodes: run {lay['servers']} server(s); on "
                    f"every node set NODE_RANK (its rank within its server) and MASTER_ADDR (its server's "
                    f"first node).")
    elif lay["nodes"] > 1:
        head.append(f"Run on each of the {lay['nodes']} generation nodes with NODE_RANK=0..{lay['nodes'] - 1} and "
                    f"HEAD_ADDR = node 0's address; nodes > 0 run headless.")
    text = "#!/usr/bin/env bash\n" + comment_block(head + warning_lines(job.notes)) + "set -euo pipefail\n"
    text += f"SERVERS={lay['servers']}  # independent vllm serve instances\n"
    text += render_array("VLLM_ARGS", secs, "argparse")
    if lay["spans_nodes"]:
        text += ("NODE_ARGS=(--node-rank \"${NODE_RANK:-0}\" --master-addr \"${MASTER_ADDR:-127.0.0.1}\")\n")
        text += "[ \"${NODE_RANK:-0}\" -gt 0 ] && NODE_ARGS+=(--headless)\n"
    elif lay["nodes"] > 1:
        text += (f"NODE_ARGS=(--data-parallel-size-local {lay['local']} --data-parallel-address "
                 f"\"${{HEAD_ADDR:-127.0.0.1}}\" --data-parallel-rpc-port {DP_RPC_PORT} "
                 f"--data-parallel-start-rank \"$(( ${{NODE_RANK:-0}} * {lay['local']} ))\")\n")
        text += "[ \"${NODE_RANK:-0}\" -gt 0 ] && NODE_ARGS+=(--headless)\n"
    else:
        text += "NODE_ARGS=()\n"
    text += f'vllm serve {model} "${{VLLM_ARGS[@]}}" "${{NODE_ARGS[@]}}" "$@"\n'
    return ExportResult(text=text, warnings=list(job.notes.warnings), filename="vllm_serve.sh", target="vllm",
                        framework=PIN.label)
