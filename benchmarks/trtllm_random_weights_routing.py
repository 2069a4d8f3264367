"""Routing of a Mixtral-8x7B engine built by TensorRT-LLM v0.9.0 from a config file without a checkpoint.

trtllm-build --model_config (the way docs/source/performance.md builds every benchmarked engine) leaves every
Parameter unfilled; Network._fill_weights (tensorrt_llm/network.py lines 156-165) fills each with
Parameter.xavier_init (tensorrt_llm/parameter.py lines 71-100): (randn * 2 - 1) * v_range, v_range =
sqrt(6)/sqrt(shape[0] + shape[1]) for 2-D shapes and 0.1 otherwise. The forward below follows v0.9.0's LLaMA
decoder (models/llama/model.py: RmsNorm, GQA attention, RmsNorm, MOE) in fp16 storage with fp32 math, and picks
experts with the v0.9.0 gating kernel's own rule (kernels/mixtureOfExperts/moe_kernels.cu topkGatingSoftmax
lines 194-390: 8 experts -> 2 threads per row of 4 experts each, strict '>' compares, lower index wins ties, the
chosen slot cleared to -10000). Prints, per layer, the experts the tokens reach and the largest |hidden|.
Simplifications: tp 1 shapes (the engine's per-rank shapes change the 2-D v_range by < 1.5x), no rotary, the
fp16 engine (A100) path; the FP8 engines quantize the attention linears (not the experts: v0.9.0's MoE plugin
has no FP8 type).
Run: python benchmarks/trtllm_random_weights_routing.py [seed ...]  (CPU, about a minute a seed; needs torch).
"""
import math
import sys

import torch

L, H, NH, KV, D, F, E, K, V = 32, 4096, 32, 8, 128, 14336, 8, 2, 32000
SEQS, T = 4, 16
H16 = torch.float16


def xavier(*shape):
    v = math.sqrt(6) / math.sqrt(shape[0] + shape[1]) if len(shape) == 2 else 0.1
    return ((torch.randn(shape) * 2 - 1) * v).to(H16)


def lin(x, w):  # y = x W^T, fp32 accumulate, fp16 out (inf past 65504)
    return (x.float() @ w.float().t()).to(H16)


def rmsnorm(x, w, eps=1e-5):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(H16)


def gate_topk(logits):
    """v0.9.0 topkGatingSoftmax for 8 experts, k=2, one row: softmax, then the kernel's argmax rule."""
    p = torch.softmax(logits.float(), -1).tolist()
    picks = []
    for _ in range(K):
        best = []
        for t in range(2):  # thread t holds experts 4t..4t+3
            mv, ex = p[4 * t], 4 * t
            for c in range(4 * t, 4 * t + 4):
                if p[c] > mv:
                    mv, ex = p[c], c
            best.append((mv, ex))
        (m0, e0), (m1, e1) = best  # butterfly: thread 0 takes thread 1's if larger, or equal with lower index
        if m1 > m0 or (m1 == m0 and e1 < e0):
            m0, e0 = m1, e1
        picks.append(e0)
        p[e0] = -10000.0
    return picks


def run(seed: int) -> None:
    torch.manual_seed(seed)
    print(f"seed {seed}")
    emb = xavier(V, H)
    tokens = torch.randint(0, V, (SEQS, T))
    h = emb[tokens]  # [SEQS, T, H]
    mask = torch.full((T, T), float("-inf")).triu(1)
    for layer in range(L):
        ln1, ln2 = xavier(H), xavier(H)
        wqkv, wo = xavier(H + 2 * KV * D, H), xavier(H, H)
        router = ((torch.randn(E, H) * 2 - 1) * (math.sqrt(6) / math.sqrt(E + H)))  # fp32 RowLinear
        x = rmsnorm(h, ln1)
        qkv = lin(x, wqkv).float()
        q, k, v = qkv.split([H, KV * D, KV * D], -1)
        q = q.view(SEQS, T, NH, D).transpose(1, 2)
        k = k.view(SEQS, T, KV, D).transpose(1, 2).repeat_interleave(NH // KV, 1)
        v = v.view(SEQS, T, KV, D).transpose(1, 2).repeat_interleave(NH // KV, 1)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D) + mask, -1) @ v
        h = (h.float() + lin(att.transpose(1, 2).reshape(SEQS, T, H).to(H16), wo).float()).to(H16)
        x = rmsnorm(h, ln2).reshape(-1, H)
        logits = x.float() @ router.t()
        picks = [gate_topk(row) for row in logits]
        used = sorted({e for pk in picks for e in pk})
        out = torch.zeros(x.shape[0], H)
        peak = 0.0  # largest |expert output| before its cast to fp16 (fp16's largest finite value: 65504)
        for e in used:
            rows = [i for i, pk in enumerate(picks) if e in pk]
            w1 = ((torch.randn(2 * F, H) * 2 - 1) * 0.1).to(H16)  # experts_weight_1[e]: 3-D parameter, v_range 0.1
            w2 = ((torch.randn(H, F) * 2 - 1) * 0.1).to(H16)      # experts_weight_2[e]
            a = lin(x[rows], w1).float()
            act32 = a[:, :F] * torch.nn.functional.silu(a[:, F:])
            y32 = act32.to(H16).float() @ w2.float().t()
            for t in (act32, y32):
                if bool(t.isnan().all()):
                    peak = float("nan")
                elif peak == peak:
                    peak = max(peak, float(t.abs().nan_to_num(nan=0.0).max()))
            y = y32.to(H16).float()
            sm = torch.softmax(logits[rows].float(), -1)
            for j, i in enumerate(rows):  # RENORMALIZE: the k chosen probabilities over their sum
                ks = [sm[j, pk].item() for pk in picks[i]]
                out[i] += y[j] * sum(kv for kv, pk in zip(ks, picks[i]) if pk == e) / sum(ks)
        h = (h.float() + out.view(SEQS, T, H).to(H16).float()).to(H16)
        hf = h.float()
        print(f"layer {layer:2d}: experts reached {used} (top-k slots per expert "
              f"{[sum(pk.count(e) for pk in picks) for e in used]} of {K * len(picks)}), largest |expert activation or "
              f"output| in fp32 {peak:.3g}; of {hf.numel()} hidden values {int(hf.isinf().sum())} inf and "
              f"{int(hf.isnan().sum())} NaN", flush=True)
        if bool(hf.isnan().all()) and layer >= 2:
            print(f"every hidden value has been NaN for 2 layers: NaN + anything stays NaN, so layers {layer + 1}-{L - 1}"
                  " gate NaN rows as above")
            break


if __name__ == "__main__":
    for seed in [int(a) for a in sys.argv[1:]] or [0]:
        run(seed)
