"""Which model a job spec names: a catalogue entry, a Hugging Face config.json, shape directives,
or a parameter count with a family."""

from __future__ import annotations

from dataclasses import replace

from slurm_liquid.errors import UsageError
from slurm_liquid.estimate.activations import DEFAULT_ACT_BYTES, GELU_FP32_BEFORE, INPLACE_COPY_SINCE, torch_version
from slurm_liquid.estimate.catalog import Catalog, ModelEntry
from slurm_liquid.jobspec import JobSpec


def synthetic_entry(spec: JobSpec) -> ModelEntry:
    """An uncatalogued model from `params` + `family`, or from shape directives."""
    family = spec.family or "decoder"
    if spec.layers and spec.hidden and family in ("encoder", "decoder", "seq2seq", "vit"):
        from slurm_liquid.estimate.shape import with_shape

        gated = family == "decoder"
        base = ModelEntry(spec.model or f"custom-{family}", family, spec.params or 1, layers=spec.layers,
                          hidden=spec.hidden, heads=spec.heads or max(1, spec.hidden // 64),
                          ffn=spec.intermediate or (8 / 3 if gated else 4) * spec.hidden,
                          vocab=spec.vocab or (0 if family == "vit" else 32000), gated_mlp=gated,
                          lm_head=family in ("decoder", "seq2seq"), tied=family != "decoder",
                          seq_len=2048 if family == "decoder" else 512, patch_size=16 if family == "vit" else 0,
                          attention="eager" if family == "seq2seq" else "sdpa",
                          # ViT recipes (torchvision, timm/DeiT, HF configs) train with dropout 0
                          dropout=False if family == "vit" else None,
                          notes="shape from directives")
        return with_shape(base, spec)
    if not spec.params:
        raise UsageError("model: give a catalogued model name, hf-config=<config.json>, shape directives "
                         "(layers= hidden= ...), or params=<count> with family=<...>")
    name = spec.model or f"custom-{family}-{spec.params}"
    if family in ("encoder", "decoder", "seq2seq"):
        # P ~= 12 L h^2 with the common aspect ratio h ~= 100 L
        # continuous shape (no rounding) so that memory grows smoothly with the parameter count
        hidden = (spec.params * 100 / 12) ** (1 / 3)
        layers = spec.params / (12 * hidden * hidden)
        return ModelEntry(name, family, spec.params, layers=layers, hidden=hidden, heads=hidden / 64,
                          ffn=4 * hidden, vocab=50257, seq_len=2048 if family == "decoder" else 512,
                          lm_head=family != "encoder", flash=family == "decoder",
                          notes="shape guessed from the parameter count; decoders (LLMs) "
                                "assumed to use fused attention")
    return ModelEntry(name, family, spec.params, act_bytes=DEFAULT_ACT_BYTES[family],
                      image_size=224, seq_len=1000 if family == "rnn" else 1,
                      act_source="family default (model not in the catalogue)")



def resolve(spec: JobSpec, catalog: Catalog) -> tuple[ModelEntry, list[str]]:
    """The model of `spec` and notes on how it was found: a catalogue entry (a generic family name
    resolves to its base member), a Hugging Face config.json, or shape directives; shape directives
    and params override the entry. An unknown name without a shape is a UsageError with close matches."""
    from slurm_liquid.estimate.shape import fields_from_hf_config, read_hf_config, with_shape

    notes: list[str] = []
    entry = catalog.find(spec.model) if spec.model else None
    if entry is not None and spec.model:
        base = catalog.generic_base(spec.model)
        if base:
            notes.append(f"model {spec.model!r} is a family: sized as its base member {base}; "
                         "name the member (or give its config.json) for a closer estimate")
    if spec.hf_config:
        fields = fields_from_hf_config(read_hf_config(spec.hf_config), spec.hf_config)
        name = spec.model or fields.get("name") or "hf-config"
        entry = ModelEntry(name=str(name), source=spec.hf_config, notes="shape from config.json",
                           **{k: v for k, v in fields.items() if k != "name"})
        notes.append(f"shape from {spec.hf_config}: {entry.layers:g} layers, hidden {entry.hidden:g}, "
                     f"{entry.params / 1e9:.2f}B parameters")
    if entry is None:
        if spec.model and not spec.params and not (spec.layers and spec.hidden):
            try:
                catalog.lookup(spec.model)  # raises with close matches
            except UsageError as exc:
                where = spec.sources.get("model")
                raise UsageError(f"{exc} (model from {where})" if where else str(exc)) from None
        return synthetic_entry(spec), notes
    entry = with_shape(entry, spec)
    if spec.torch and torch_version(spec)[:2] < min(GELU_FP32_BEFORE, INPLACE_COPY_SINCE):
        notes.append(f"torch={spec.torch}: sized for PyTorch before 1.10 (autocast ran GELU in fp32; "
                     "in-place ReLU6 saved no copy of its input)")
    if spec.params and spec.params != entry.params:
        entry = replace(entry, params=spec.params)
    if spec.family and spec.family != entry.family:
        raise UsageError(f"family: {spec.family} conflicts with the "
                         f"{'config' if spec.hf_config else 'catalogue'}'s {entry.family} for {entry.name}")
    return entry, notes


def resolve_entry(spec: JobSpec, catalog: Catalog) -> ModelEntry:
    return resolve(spec, catalog)[0]

