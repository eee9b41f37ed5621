"""The counters NVIDIA's DRA driver publishes per GPU with DynamicMIG, and what each MIG device consumes.

Per GPU one counter set: multiprocessors, copy engines, decoders, encoders, JPEG and OFA engines, memory
(MiB) and one counter per memory slot; the full-GPU device consumes all of it, a MIG device its profile's
figures plus its memory slots (shared/reference/dra-mig.md §3, ``partitions.go``). kube-scheduler allocates a
device only while all of its counters are still free, so these figures, not our layout rules, decide what the
scheduler takes (see :mod:`.scheduler`). Figures come from the catalog (NVML's ``lgip`` output); where the
catalog has none (unconfirmed models) they are derived from the slice grid.
"""

from __future__ import annotations

from .catalog import EngineCounts, GpuModel, MigProfile

#: Counter names, in the driver's order; memory is in MiB here (a quantity in the ResourceSlice).
NAMES = ("multiprocessors", "copy-engines", "decoders", "encoders", "jpeg-engines", "ofa-engines", "memory")


def full_profile(model: GpuModel) -> MigProfile:
    """The profile that takes the whole GPU; its figures are the GPU's counters."""
    return max(model.profiles, key=lambda p: (p.memory_slices, p.compute_slices))


def profile_counters(model: GpuModel, profile: MigProfile) -> dict[str, int]:
    """What one device of ``profile`` consumes (memory slots aside)."""
    full = full_profile(model)
    full_sm = full.sm_count or 16 * model.compute_slices
    sm = profile.sm_count or full_sm * profile.compute_slices // model.compute_slices
    engines = profile.engines or _engines_by_share(model, profile, full)
    memory = profile.memory_mib or model.memory_mib * profile.memory_slices // model.memory_slices
    values = (sm, engines.ce, engines.dec, engines.enc, engines.jpeg, engines.ofa, memory)
    return dict(zip(NAMES, values, strict=True))


def _engines_by_share(model: GpuModel, profile: MigProfile, full: MigProfile) -> EngineCounts:
    """Engines of a profile the catalog has no lgip figures for: its share of the whole GPU's (rounded down,
    at least one copy engine), all JPEG and OFA engines for media-extension profiles. Where the whole GPU's
    figures are unknown too, one of each per compute slice and OFA for the whole GPU only."""
    whole = full.engines
    if whole is None or profile is full:
        return EngineCounts(
            dec=profile.compute_slices,
            ce=profile.compute_slices,
            jpeg=profile.compute_slices,
            ofa=1 if profile is full or profile.has_media_extensions else 0,
        )
    share = profile.compute_slices / model.compute_slices
    media = profile.has_media_extensions
    return EngineCounts(
        dec=max(int(whole.dec * share), 1 if media else 0),
        enc=int(whole.enc * share),
        ce=max(int(whole.ce * share), 1),
        jpeg=whole.jpeg if media else int(whole.jpeg * share),
        ofa=whole.ofa if media else 0,
    )


def gpu_counters(model: GpuModel) -> dict[str, int]:
    """One GPU's counter set (memory slots aside): the full profile's figures."""
    return profile_counters(model, full_profile(model))
