"""Architectures of a few well-known open models, as their config.json on the Hugging Face Hub states them
(docs/advisor.md lists each source). `params_b` is the parameter count in billions, as the model card gives it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Architecture:
    name: str
    params_b: float
    layers: int
    hidden: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    known: bool = True

    @property
    def kv_elements_per_token(self) -> int:
        """Keys and values per token in elements: 2 (K and V) x layers x KV heads x head size."""
        return 2 * self.layers * self.kv_heads * self.head_dim

    @property
    def lora_params_per_rank(self) -> int:
        """Adapter parameters per unit of LoRA rank on every attention and MLP projection: r x (in + out) each."""
        q = self.hidden * 2
        kv = 2 * (self.hidden + self.kv_heads * self.head_dim)
        o = self.hidden * 2
        mlp = 3 * (self.hidden + self.intermediate)
        return self.layers * (q + kv + o + mlp)


KNOWN_MODELS: dict[str, Architecture] = {
    a.name: a
    for a in (
        Architecture("llama-3.2-1b", 1.24, 16, 2048, 8, 64, 8192, 128256),
        Architecture("llama-3.2-3b", 3.21, 28, 3072, 8, 128, 8192, 128256),
        Architecture("llama-3.1-8b", 8.03, 32, 4096, 8, 128, 14336, 128256),
        Architecture("llama-3.1-70b", 70.6, 80, 8192, 8, 128, 28672, 128256),
        Architecture("mistral-7b", 7.25, 32, 4096, 8, 128, 14336, 32768),
        Architecture("qwen2.5-0.5b", 0.49, 24, 896, 2, 64, 4864, 151936),
        Architecture("qwen2.5-7b", 7.62, 28, 3584, 4, 128, 18944, 152064),
        Architecture("qwen2.5-14b", 14.7, 48, 5120, 8, 128, 13824, 152064),
        Architecture("qwen2.5-32b", 32.8, 64, 5120, 8, 128, 27648, 152064),
        Architecture("gemma-2-9b", 9.24, 42, 3584, 8, 256, 14336, 256000),
        Architecture("phi-3-mini", 3.82, 32, 3072, 32, 96, 8192, 32064),
    )
}

# What an unknown model of P parameters is assumed to look like: a dense decoder with 12 h^2 parameters per layer,
# as many layers as h / 128 (the ratio of the Llama family), grouped-query attention with 8 KV heads of 128, an MLP
# 3.5 h wide and a 128k vocabulary. Close for current dense models; models with full multi-head attention need
# more KV cache than this says (name them, or add them to the table).
ASSUMED_KV_HEADS = 8
ASSUMED_HEAD_DIM = 128
ASSUMED_VOCAB = 128000


def assumed_architecture(params_b: float) -> Architecture:
    params = params_b * 1e9
    hidden = max(512, round((params * 128 / 12) ** (1 / 3) / 128) * 128)
    layers = max(1, round(params / (12 * hidden * hidden)))
    return Architecture(
        name=f"{params_b:g}B (assumed shape)",
        params_b=params_b,
        layers=layers,
        hidden=hidden,
        kv_heads=ASSUMED_KV_HEADS,
        head_dim=ASSUMED_HEAD_DIM,
        intermediate=round(3.5 * hidden),
        vocab=ASSUMED_VOCAB,
        known=False,
    )


def find_model(name: str) -> Architecture | None:
    """A known model by its table name, ignoring case, an `org/` prefix and `-instruct`/`-chat` suffixes."""
    key = name.strip().lower().rsplit("/", 1)[-1]
    for suffix in ("-instruct", "-chat", "-it"):
        key = key.removesuffix(suffix)
    key = key.replace("meta-llama-", "llama-").replace("-v0.3", "").replace("-4k", "")
    return KNOWN_MODELS.get(key)
