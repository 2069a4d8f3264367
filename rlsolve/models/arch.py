"""LLM architecture and its arithmetic: parameters, FLOPs, KV-cache and activation bytes.

Counts follow the Hugging Face implementations (bias-free projections unless `qkv_bias`;
RMSNorm/LayerNorm weights counted; rotary embeddings have no parameters).
"""
from __future__ import annotations

from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Activation = Literal["swiglu", "gelu", "relu", "squared_relu"]


class Architecture(BaseModel):
    """A transformer decoder. Dense when `experts == 0`; MLA when `kv_lora_rank > 0`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field("inline", description="Catalog id (lowercase), e.g. llama-3.1-70b.")
    hf_id: str | None = Field(None, description="Hugging Face repository id.")
    aliases: list[str] = Field(default_factory=list, description="Other accepted names.")
    layers: int = Field(gt=0, le=10000, description="Transformer blocks.")
    hidden: int = Field(gt=0, le=1000000, description="Model (residual) width.")
    heads: int = Field(gt=0, le=100000, description="Query heads.")
    kv_heads: int | None = Field(None, gt=0, le=100_000, description="Key/value heads (GQA); default = heads.")
    head_dim: int | None = Field(None, gt=0, le=100_000, description="Per-head width; default hidden/heads. "
                                 "Qwen3 sets it explicitly (128).")
    ffn: int | None = Field(None, gt=0, le=10_000_000, description="Dense MLP width; default 4*hidden (gelu) or "
                            "the Llama rule 8/3*hidden rounded to 256 (swiglu).")
    vocab: int = Field(32000, gt=0, le=100_000_000, description="Vocabulary size (padded as in the checkpoint).")
    activation: Activation = Field("swiglu", description="MLP type: swiglu has 3 matrices, others 2. An inline "
                                   "shape without it takes the type whose parameter count matches params_b, "
                                   "else gelu when ffn = 4*hidden (the GPT convention), else swiglu.")
    tied_embeddings: bool = Field(False, description="Input embedding shared with the LM head.")
    output_width: int | None = Field(None, gt=0, le=100_000_000, description="Width of the output layer: None "
                                     "= vocab (an LM head); 1 = a value or reward model's scalar head (set where "
                                     "the spec's value and reward models are resolved: resolve.scalar_head).")
    qkv_bias: bool = Field(False, description="Biases on the q/k/v projections (Qwen2/2.5).")
    experts: int = Field(0, ge=0, le=1_000_000, description="Routed experts per MoE layer; 0 = dense model.")
    experts_per_token: int = Field(0, ge=0, le=1_000_000, description="Routed experts each token visits (top-k).")
    moe_ffn: int | None = Field(None, gt=0, le=10_000_000, description="Width of one routed expert's MLP.")
    shared_experts: int = Field(0, ge=0, le=1_000_000, description="Always-on experts per MoE layer (width moe_ffn).")
    dense_layers: int = Field(0, ge=0, le=10_000, description="Leading layers with a dense MLP in an MoE model.")
    q_lora_rank: int = Field(0, ge=0, le=1_000_000, description="MLA query compression rank (0: plain q projection).")
    kv_lora_rank: int = Field(0, ge=0, le=1_000_000, description="MLA latent width; > 0 turns on MLA.")
    qk_nope_head_dim: int = Field(0, ge=0, le=1_000_000, description="MLA non-rotary q/k head width.")
    qk_rope_head_dim: int = Field(0, ge=0, le=1_000_000, description="MLA rotary q/k head width.")
    v_head_dim: int = Field(0, ge=0, le=1_000_000, description="MLA value head width.")
    params_b: float | None = Field(None, gt=0, description="Published size in billions (informational).")
    source: str = Field("inline", description="Where the shape comes from (config.json, paper).")

    @model_validator(mode="after")
    def _consistent(self) -> "Architecture":
        if self.experts and not self.experts_per_token:
            raise ValueError("an MoE model (experts > 0) needs experts_per_token")
        if self.experts_per_token > max(self.experts, 0) and self.experts:
            raise ValueError("experts_per_token cannot exceed experts")
        # Without these two checks moe_layers goes negative / MLA widths are zero and every
        # parameter, FLOP and KV figure below is silently wrong.
        if self.dense_layers > self.layers:
            raise ValueError(f"dense_layers ({self.dense_layers}) cannot exceed layers ({self.layers})")
        if self.is_mla and not (self.qk_nope_head_dim and self.qk_rope_head_dim and self.v_head_dim):
            raise ValueError("MLA (kv_lora_rank > 0) needs qk_nope_head_dim, qk_rope_head_dim and v_head_dim")
        if self.head_dim is None and not self.is_mla and self.hidden % self.heads:
            # hidden // heads would silently floor the head width and every attention figure
            raise ValueError(f"hidden ({self.hidden}) is not divisible by heads ({self.heads}); set head_dim "
                             f"(e.g. {max(self.hidden // self.heads, 1)}) or make hidden a multiple of heads")
        if self.tied_embeddings and self.d_out != self.vocab:
            raise ValueError(f"an output layer of width {self.d_out} cannot be tied to the {self.vocab}-token "
                             "input embedding (tied_embeddings needs an LM head)")
        if self.heads % self.n_kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.n_kv_heads})")
        return self

    # --- resolved shape -------------------------------------------------------------------
    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def d_head(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def d_ffn(self) -> int:
        if self.ffn:
            return self.ffn
        if self.activation == "swiglu":
            return int(256 * ((8 * self.hidden / 3 + 255) // 256))
        return 4 * self.hidden

    @property
    def d_out(self) -> int:
        """Width of the output layer: the vocabulary for an LM head, 1 for a scalar (value/reward) head."""
        return self.output_width or self.vocab

    @property
    def d_moe_ffn(self) -> int:
        return self.moe_ffn or self.d_ffn

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def q_width(self) -> int:
        """Total query width (heads x per-head q/k width)."""
        if self.is_mla:
            return self.heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        return self.heads * self.d_head

    @property
    def v_width(self) -> int:
        return self.heads * (self.v_head_dim if self.is_mla else self.d_head)

    # --- parameters -------------------------------------------------------------------------
    @cached_property
    def attn_params_per_layer(self) -> int:
        h = self.hidden
        if self.is_mla:
            q = (h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * self.q_width
                 if self.q_lora_rank else h * self.q_width)
            kv = (h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
                  + self.kv_lora_rank * self.heads * (self.qk_nope_head_dim + self.v_head_dim))
            return q + kv + self.v_width * h
        kv = self.n_kv_heads * self.d_head
        bias = (self.q_width + 2 * kv) if self.qkv_bias else 0
        return h * self.q_width + 2 * h * kv + self.q_width * h + bias

    def _mlp_params(self, width: int) -> int:
        mats = 3 if self.activation == "swiglu" else 2
        return mats * self.hidden * width

    @cached_property
    def dense_mlp_params(self) -> int:
        return self._mlp_params(self.d_ffn)

    @cached_property
    def expert_params(self) -> int:
        """Parameters of one routed expert."""
        return self._mlp_params(self.d_moe_ffn)

    @cached_property
    def output_params(self) -> int:
        """Weights of the output layer (hidden x d_out; the input embedding's when tied)."""
        return self.d_out * self.hidden

    @cached_property
    def embedding_params(self) -> int:
        """The input embedding and the output layer (one matrix when tied)."""
        return self.vocab * self.hidden + (0 if self.tied_embeddings else self.output_params)

    @cached_property
    def routed_expert_params_total(self) -> int:
        """All routed-expert parameters of the model (the part expert parallelism shards)."""
        return self.moe_layers * self.experts * self.expert_params

    def _layer_params(self, routed: int) -> tuple[int, int]:
        """(dense-layer params, moe-layer params) with `routed` experts counted per MoE layer."""
        norms = 2 * self.hidden
        dense = self.attn_params_per_layer + self.dense_mlp_params + norms
        moe = (self.attn_params_per_layer + norms + self.hidden * self.experts
               + (routed + self.shared_experts) * self.expert_params)
        return dense, moe

    @cached_property
    def total_params(self) -> int:
        dense, moe = self._layer_params(self.experts)
        n_dense = self.layers - self.moe_layers
        return n_dense * dense + self.moe_layers * moe + self.embedding_params + self.hidden

    @cached_property
    def active_params(self) -> int:
        dense, moe = self._layer_params(self.experts_per_token)
        n_dense = self.layers - self.moe_layers
        return n_dense * dense + self.moe_layers * moe + self.embedding_params + self.hidden

    @cached_property
    def non_expert_params(self) -> int:
        """Parameters outside routed experts (replicated across expert-parallel ranks)."""
        return self.total_params - self.routed_expert_params_total

    # --- FLOPs ------------------------------------------------------------------------------
    @cached_property
    def matmul_flops_per_token(self) -> float:
        """Forward FLOPs of the weight GEMMs for one token (2 per active weight, output layer
        included, input embedding lookup excluded)."""
        dense, moe = self._layer_params(self.experts_per_token)
        n_dense = self.layers - self.moe_layers
        weights = n_dense * dense + self.moe_layers * moe + self.output_params
        return 2.0 * weights

    def attention_flops_per_token(self, context: float, causal: bool = True) -> float:
        """Forward FLOPs of QK^T and AV for one token attending to `context` tokens.

        Megatron's published FLOP counts use the full (non-causal) square: pass causal=False
        to reproduce them; the real causal kernels do half the work."""
        f = 2.0 * context * (self.q_width + self.v_width) * self.layers
        return f * (0.5 if causal else 1.0)

    # --- memory -----------------------------------------------------------------------------
    def kv_bytes_per_token(self, dtype_bytes: float = 2.0) -> float:
        """KV-cache bytes per token over all layers. MLA caches its compressed latent plus
        the rotary key (vLLM/SGLang do this); GQA caches kv_heads keys and values."""
        if self.is_mla:
            return self.layers * (self.kv_lora_rank + self.qk_rope_head_dim) * dtype_bytes
        return 2.0 * self.layers * self.n_kv_heads * self.d_head * dtype_bytes

    def activation_bytes_per_token_layer(self) -> float:
        """Bytes stored per token per layer for the backward pass, 16-bit, flash attention
        (no s^2 score matrix), no dropout, no tensor parallelism. Korthikanti et al. 2022
        count 34*h for GPT (with dropout masks and the s^2 scores removed this is 24*h+...);
        here each stored tensor is listed so GQA, SwiGLU and MoE shapes come out right."""
        h = self.hidden
        kv = 2 * self.n_kv_heads * self.d_head if not self.is_mla else (
            self.kv_lora_rank + self.qk_rope_head_dim + self.heads * (self.qk_nope_head_dim + self.v_head_dim))
        attn = h + h + self.q_width + kv + self.v_width  # ln1 in, qkv in, q, k+v, attn out
        if self.is_moe:
            k = self.experts_per_token + self.shared_experts
            width = self.d_moe_ffn
            mlp_w = k * (3 * width if self.activation == "swiglu" else 2 * width) + k * h
        else:
            width = self.d_ffn
            mlp_w = 3 * width if self.activation == "swiglu" else 2 * width
        mlp = h + h + mlp_w  # ln2 in, mlp in, mlp internals
        return 2.0 * (attn + mlp)
