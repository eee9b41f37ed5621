"""GPU memory a model needs to serve or fine-tune, part by part (docs/advisor.md has each formula's source).

Serving (vLLM-like): weights at the chosen precision; the KV cache, 2 x layers x KV heads x head size x tokens x
2 bytes, for `context` tokens of each of `sequences` sequences; activations of one prefill chunk of at most
PREFILL_CHUNK tokens; a fixed runtime overhead (CUDA context, cuBLAS workspaces, CUDA graphs).

Fine-tuning, full: 16 bytes per parameter for mixed-precision AdamW (bf16 weights and gradients, fp32 master
weights and two moments), or the same 16 in fp32. LoRA: the frozen base at the chosen precision (int4: QLoRA)
plus rank-16 adapters on every projection trained like full fine-tuning. Both: activations of `sequences`
sequences of `context` tokens with gradient checkpointing (each layer's input kept, one layer's activations
recomputed at a time), plus the fp32 logits the loss needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from allocations.advisor.known_models import Architecture

GIB = 1024**3
PRECISIONS = ("fp32", "bf16", "fp8", "int8", "int4")
BYTES_PER_PARAM = {"fp32": 4.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
MODES = ("serve", "full", "lora")
FULL_PRECISIONS = ("fp32", "bf16")
# Tokens vLLM puts through the model in one step at most (its max_num_batched_tokens for chunked prefill).
PREFILL_CHUNK = 8192
SERVE_OVERHEAD = 1.5 * GIB
TRAIN_OVERHEAD = 1.0 * GIB
LORA_RANK = 16
# Bytes per trained parameter: weights, gradients and AdamW's two moments (mixed precision: bf16 weights and
# gradients plus an fp32 master copy and fp32 moments; fp32: all four in fp32); both 16.
TRAINED_BYTES_PER_PARAM = 16
# Bytes per token and hidden unit of one transformer layer's activations in 16 bits, without the attention
# scores (flash attention never stores them): Korthikanti et al. 2022, eq. 2 with its 5as/h term dropped.
LAYER_ACTIVATION_BYTES = 34


@dataclass(frozen=True, slots=True)
class Workload:
    architecture: Architecture
    precision: str
    context: int
    sequences: int
    mode: str


@dataclass(frozen=True, slots=True)
class Estimate:
    """Bytes per part; `notes` say what was assumed."""

    weights: float
    kv_cache: float
    activations: float
    training_state: float
    overhead: float
    notes: tuple[str, ...] = field(default=())

    @property
    def total(self) -> float:
        return self.weights + self.kv_cache + self.activations + self.training_state + self.overhead

    def as_gib(self) -> dict[str, float]:
        parts = {
            "weights": self.weights,
            "kv_cache": self.kv_cache,
            "activations": self.activations,
            "training_state": self.training_state,
            "overhead": self.overhead,
            "total": self.total,
        }
        return {k: round(v / GIB, 2) for k, v in parts.items()}


def estimate_memory(w: Workload) -> Estimate:
    """The estimate for a checked workload (pools.py's parse_workload checks precision and mode)."""
    a = w.architecture
    params = a.params_b * 1e9
    # Activations and the KV cache stay in 16 bits with quantized weights (vLLM's "auto" KV cache dtype), fp32 with
    # fp32 weights.
    act_bytes = 4 if w.precision == "fp32" else 2
    notes = (
        []
        if a.known
        else [
            f"Shape assumed from the parameter count: {a.layers} layers, hidden size "
            f"{a.hidden}, {a.kv_heads} KV heads of {a.head_dim}."
        ]
    )
    if w.mode == "serve":
        tokens = min(w.context * w.sequences, PREFILL_CHUNK)
        return Estimate(
            weights=params * BYTES_PER_PARAM[w.precision],
            kv_cache=a.kv_elements_per_token * act_bytes * w.context * w.sequences,
            activations=tokens * (2 * a.intermediate + 4 * a.hidden) * act_bytes + w.sequences * a.vocab * 4,
            training_state=0.0,
            overhead=SERVE_OVERHEAD,
            notes=tuple(notes),
        )
    tokens = w.context * w.sequences
    activations = (
        tokens * a.hidden * act_bytes * a.layers
        + tokens * a.hidden * LAYER_ACTIVATION_BYTES * (act_bytes / 2)
        + tokens * a.vocab * 4
    )
    if w.mode == "full":
        return Estimate(
            weights=params * BYTES_PER_PARAM[w.precision],
            kv_cache=0.0,
            activations=activations,
            training_state=params * (TRAINED_BYTES_PER_PARAM - BYTES_PER_PARAM[w.precision]),
            overhead=TRAIN_OVERHEAD,
            notes=(*notes, "Full fine-tuning with AdamW: 16 bytes per parameter before activations."),
        )
    adapters = a.lora_params_per_rank * LORA_RANK
    notes.append(f"LoRA rank {LORA_RANK} on every projection: {adapters / 1e6:.0f} M trained parameters.")
    if w.precision == "int4":
        notes.append("int4 base weights: QLoRA.")
    return Estimate(
        weights=params * BYTES_PER_PARAM[w.precision],
        kv_cache=0.0,
        activations=activations,
        training_state=adapters * TRAINED_BYTES_PER_PARAM,
        overhead=TRAIN_OVERHEAD,
        notes=tuple(notes),
    )
