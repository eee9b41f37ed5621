"""The memory estimates against published figures (docs/advisor.md, "Checks against published figures").

Hugging Face, "Llama 3.1 - 405B, 70B & 8B with multilinguality and long context" (2024-07-23),
https://huggingface.co/blog/llama31: "Inference memory requirements" (weights in GB = 1e9 bytes; the KV cache
in GB computed with 1024**3 and 1k = 1024 tokens) and "Training memory requirements".
Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models" (2020), section 3.1:
mixed-precision Adam keeps 16 bytes per parameter (2 fp16 weights, 2 fp16 gradients, 12 fp32 optimizer states).
"""

from __future__ import annotations

import pytest

from allocations.advisor.estimate import GIB, Workload, estimate_memory
from allocations.advisor.fit import fit_profile, fit_share
from allocations.advisor.known_models import KNOWN_MODELS, assumed_architecture, find_model
from allocations.mig.catalog import load_catalog

LLAMA_8B = KNOWN_MODELS["llama-3.1-8b"]
LLAMA_70B = KNOWN_MODELS["llama-3.1-70b"]
GB = 1e9
H100 = "NVIDIA H100 80GB HBM3"


def serve(arch, precision="bf16", context=4096, sequences=1):
    return estimate_memory(Workload(arch, precision, context, sequences, "serve"))


@pytest.mark.parametrize(
    ("arch", "precision", "published_gb"),
    [
        (LLAMA_8B, "bf16", 16),
        (LLAMA_8B, "fp8", 8),
        (LLAMA_8B, "int4", 4),
        (LLAMA_70B, "bf16", 140),
        (LLAMA_70B, "fp8", 70),
        (LLAMA_70B, "int4", 35),
    ],
)
def test_weights_match_the_llama_3_1_blog_table(arch, precision, published_gb):
    # when
    weights = serve(arch, precision).weights
    # then: within 2 % (the blog rounds 8.03 B and 70.6 B parameters to 8 and 70)
    assert weights / GB == pytest.approx(published_gb, rel=0.02)


@pytest.mark.parametrize(
    ("arch", "tokens", "published_gib"),
    [(LLAMA_8B, 1024, 0.125), (LLAMA_8B, 16000, 1.95), (LLAMA_8B, 128000, 15.62), (LLAMA_70B, 128000, 39.06)],
)
def test_kv_cache_matches_the_llama_3_1_blog_table(arch, tokens, published_gib):
    # when
    kv = serve(arch, context=tokens).kv_cache
    # then
    assert kv / GIB == pytest.approx(published_gib, abs=0.01)


def test_kv_cache_grows_with_concurrent_sequences_and_stays_16_bit_under_quantized_weights():
    one = serve(LLAMA_8B, "int4", context=8192, sequences=1)
    eight = serve(LLAMA_8B, "int4", context=8192, sequences=8)
    assert eight.kv_cache == 8 * one.kv_cache
    assert one.kv_cache == serve(LLAMA_8B, "bf16", context=8192).kv_cache
    assert serve(LLAMA_8B, "fp32", context=8192).kv_cache == 2 * one.kv_cache


@pytest.mark.parametrize(("precision", "per_param"), [("bf16", 16), ("fp32", 16)])
def test_full_fine_tuning_keeps_16_bytes_per_parameter_before_activations(precision, per_param):
    # when
    e = estimate_memory(Workload(LLAMA_8B, precision, 512, 1, "full"))
    # then: ZeRO's 16 bytes per parameter for mixed-precision Adam (fp32: 4 + 4 + 8)
    assert (e.weights + e.training_state) / (LLAMA_8B.params_b * 1e9) == pytest.approx(per_param)
    assert e.activations > 0 and e.kv_cache == 0


@pytest.mark.parametrize(
    ("arch", "precision", "published_gb"),
    [(LLAMA_8B, "bf16", 16), (LLAMA_8B, "int4", 6), (LLAMA_70B, "bf16", 160), (LLAMA_70B, "int4", 48)],
)
def test_lora_and_qlora_are_near_the_llama_3_1_blog_training_table(arch, precision, published_gb):
    # given: the blog states no batch or sequence length; one sequence of 1,024 tokens
    e = estimate_memory(Workload(arch, precision, 1024, 1, "lora"))
    # then: within 25 %
    assert e.total / GB == pytest.approx(published_gb, rel=0.25)


def test_an_unknown_model_gets_a_plausible_shape_from_its_size():
    # when
    assumed = assumed_architecture(8.0)
    # then: close to Llama 3.1 8B, and said to be assumed
    assert not assumed.known
    assert 28 <= assumed.layers <= 40 and 3584 <= assumed.hidden <= 4608
    kv = serve(assumed, context=128000).kv_cache
    assert kv == pytest.approx(serve(LLAMA_8B, context=128000).kv_cache, rel=0.15)
    assert any("assumed" in n for n in serve(assumed).notes)


def test_known_names_are_found_with_org_prefixes_and_suffixes():
    assert find_model("meta-llama/Llama-3.1-8B-Instruct") is LLAMA_8B
    assert find_model("Qwen/Qwen2.5-7B-Instruct") is KNOWN_MODELS["qwen2.5-7b"]
    assert find_model("no-such-model") is None


def test_an_8b_model_in_bf16_fits_a_3g_40gb_and_not_the_smaller_slices_of_an_h100():
    # given
    model = load_catalog().model(H100)
    e = serve(LLAMA_8B, context=8192, sequences=4)
    # when
    fit = fit_profile(e.total, model, list(model.profile_names()))
    # then: the problem the product exists for: not a whole H100
    assert fit.profile == "3g.40gb"
    assert fit.cost is not None and fit.cost.compute_slices == 3 and fit.cost.memory_slices == 4
    refused = dict(fit.refused)
    assert set(refused) >= {"1g.10gb", "1g.20gb", "2g.20gb"}
    assert "needs" in refused["1g.10gb"]


def test_int4_brings_the_same_model_down_to_a_1g_slice():
    model = load_catalog().model(H100)
    fit = fit_profile(serve(LLAMA_8B, "int4", context=4096).total, model, list(model.profile_names()))
    assert fit.profile == "1g.10gb"


def test_a_model_larger_than_the_whole_gpu_says_why_nothing_fits():
    model = load_catalog().model(H100)
    fit = fit_profile(serve(LLAMA_70B).total, model, list(model.profile_names()))
    assert fit.profile is None and fit.cost is None
    assert "larger GPUs" in fit.refused[-1][1]


def test_a_share_is_the_estimate_with_headroom_in_whole_gib():
    # when
    e = serve(LLAMA_8B, "int4")
    fit = fit_share(e.total, 81559, mps=False)
    # then
    assert fit.share_mib is not None and fit.share_mib % 1024 == 0
    assert fit.share_mib * 0.9 * 1024**2 >= e.total > (fit.share_mib - 1024) * 0.9 * 1024**2
    assert fit.cost is not None and fit.cost.memory_slices == fit.share_mib // 1024
    assert fit_share(serve(LLAMA_70B).total, 81559, mps=True).share_mib is None
