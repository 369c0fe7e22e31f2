"""A model is its architecture numbers: parameter counts from shapes, Hugging Face config.json files,
and shape directives (`layers= hidden= heads= kv-heads= intermediate= vocab= experts= top-k=`).

Nothing here touches the network: `hf-config=PATH` is a file on the submitting machine, read with a
size bound and checked field by field (a config is a user's claim like any directive).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Mapping

from slurm_liquid.errors import UsageError

MAX_CONFIG_BYTES = 4 << 20          # real config.json files are a few KiB
# HF `model_type` -> family; decoders unless listed
_ENCODERS = {"bert", "roberta", "xlm-roberta", "deberta", "deberta-v2", "distilbert", "albert",
             "electra", "camembert", "modernbert", "xlnet", "mpnet", "ernie"}
_SEQ2SEQ = {"t5", "mt5", "umt5", "bart", "mbart", "pegasus", "marian", "longt5", "switch_transformers"}
_VISION = {"vit", "deit", "beit", "dinov2", "vit_mae", "swin", "swinv2", "siglip_vision_model",
           "clip_vision_model"}
# decoders whose MLP is gated (SwiGLU/GeGLU): three matrices per MLP
_GATED = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
          "gemma3_text", "phi3", "olmo", "olmo2", "deepseek_v2", "deepseek_v3", "granite", "cohere",
          "internlm2", "yi", "starcoder2_gated", "smollm3", "glm", "exaone"}
# HF implementations without SDPA/flash support default to eager attention
_EAGER = {"t5", "mt5", "umt5", "xlnet", "deberta", "deberta-v2", "longt5", "switch_transformers"}


def transformer_params(layers: float, hidden: float, heads: float, kv_heads: float, head_dim: float,
                       ffn: float, vocab: float, gated: bool, experts: int = 1, tied: bool = True,
                       lm_head: bool = True, seq2seq: bool = False, positions: int = 0) -> float:
    """Parameters of a transformer from its shape (biases and norms approximated by 4h per layer)."""
    q, kv = heads * head_dim, kv_heads * head_dim
    attention = hidden * q + 2 * hidden * kv + q * hidden
    if seq2seq:                      # half the layers are decoders with cross-attention
        attention *= 1.5
    mlp = (3 if gated else 2) * hidden * ffn * max(1, experts) + (hidden * experts if experts > 1 else 0)
    embed = vocab * hidden + positions * hidden
    head = vocab * hidden if lm_head and not tied else 0
    return layers * (attention + mlp + 4 * hidden) + embed + head


def _get(config: Mapping[str, Any], *names: str) -> Any:
    for name in names:
        value = config.get(name)
        if value is not None:
            return value
    return None


def _number(config: Mapping[str, Any], where: str, *names: str, lo: float = 1, hi: float = 1e8) -> float | None:
    value = _get(config, *names)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise UsageError(f"hf-config {where}: {names[0]} must be a number in {lo:g}..{hi:g}, not {value!r}")
    return float(value)


def read_hf_config(path: str) -> dict[str, Any]:
    """The JSON object in `path` (bounded; UsageError naming the file otherwise)."""
    from slurm_liquid.asuser import UserFileError, read_user_file   # a regular file, bounded, as its user

    try:
        data = json.loads(read_user_file(path, MAX_CONFIG_BYTES).decode("utf-8"))
    except UserFileError as exc:
        raise UsageError(f"hf-config {path}: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise UsageError(f"hf-config {path}: cannot read it: {reason}") from None
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"hf-config {path}: not valid JSON: {str(exc)[:200]}") from None
    if not isinstance(data, dict):
        raise UsageError(f"hf-config {path}: must be a JSON object (a model's config.json)")
    return data


def fields_from_hf_config(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """ModelEntry fields from a Hugging Face config (text models, ViT/Swin vision models)."""
    # multimodal configs nest the language model
    text = data.get("text_config")
    config: Mapping[str, Any] = text if isinstance(text, Mapping) and _get(text, "hidden_size") else data
    kind = str(config.get("model_type") or data.get("model_type") or "").lower()
    arch = " ".join(str(a) for a in data.get("architectures") or [] if isinstance(a, str)).lower()
    hidden = _number(config, where, "hidden_size", "n_embd", "d_model", "dim", hi=1e6)
    if hidden is None:
        raise UsageError(f"hf-config {where}: no hidden_size (n_embd, d_model): not a transformer config "
                         "this estimator reads")
    if kind in _VISION or "image_size" in config and "patch_size" in config:
        family = "vit"
    elif kind in _SEQ2SEQ or config.get("is_encoder_decoder"):
        family = "seq2seq"
    elif kind in _ENCODERS or any(w in arch for w in ("formaskedlm", "forsequenceclassification",
                                                       "fortokenclassification", "forquestionanswering")):
        family = "encoder"
    else:
        family = "decoder"
    layers = _number(config, where, "num_hidden_layers", "n_layer", "num_layers", "n_layers", hi=1e4)
    depths = config.get("depths")
    if layers is None and isinstance(depths, list) and all(isinstance(d, int) for d in depths):
        layers = float(sum(depths))
    if not layers:
        raise UsageError(f"hf-config {where}: no num_hidden_layers (n_layer, num_layers)")
    if family == "seq2seq":
        layers += _number(config, where, "num_decoder_layers", "decoder_layers", hi=1e4) or layers
    heads = _number(config, where, "num_attention_heads", "n_head", "num_heads", "encoder_attention_heads",
                    hi=1e5) or max(1.0, hidden // 64)
    kv_heads = _number(config, where, "num_key_value_heads", "num_kv_heads", "multi_query_group_num",
                       hi=1e5) or heads
    head_dim = _number(config, where, "head_dim", "d_kv", "kv_channels", hi=1e5) or hidden / heads
    ffn = _number(config, where, "moe_intermediate_size", "intermediate_size", "n_inner", "d_ff",
                  "ffn_dim", "encoder_ffn_dim", "d_inner", "ffn_hidden_size", hi=1e7)
    experts = int(_number(config, where, "num_local_experts", "num_experts", "n_routed_experts",
                          hi=1e5) or 1)
    top_k = int(_number(config, where, "num_experts_per_tok", "top_k", "moe_topk", hi=1e3) or (2 if experts > 1 else 1))
    shared = _number(config, where, "shared_expert_intermediate_size", hi=1e7) or 0
    vocab = int(_number(config, where, "vocab_size", "padded_vocab_size", hi=1e8) or (0 if family == "vit" else 32000))
    act = str(_get(config, "hidden_act", "activation_function", "hidden_activation", "feed_forward_proj") or "")
    gated = kind in _GATED or "gated" in act.lower() or kind.endswith("_moe") or experts > 1
    if ffn is None:
        ffn = (8 / 3 if gated else 4) * hidden
    tied = bool(config.get("tie_word_embeddings", data.get("tie_word_embeddings", family != "decoder")))
    fields: dict[str, Any] = dict(
        family=family, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        ffn=ffn, vocab=vocab, gated_mlp=gated, experts=experts, top_k=top_k, tied=tied,
        lm_head=family in ("decoder", "seq2seq"), attention="eager" if kind in _EAGER else "sdpa",
        activation=act.lower() if isinstance(act, str) else "",
        dropout=float(_number(config, where, "hidden_dropout_prob", "resid_pdrop", "dropout_rate",
                              "hidden_dropout", "dropout", lo=0, hi=1) or 0) > 0)
    seq = _number(config, where, "max_position_embeddings", "n_positions", "n_ctx", "seq_length", hi=1e8)
    if family == "vit":
        image = _number(config, where, "image_size", hi=1e5) or 224
        patch = _number(config, where, "patch_size", hi=1e4) or 16
        fields.update(image_size=int(image), patch_size=int(patch), lm_head=False, vocab=0, tied=True,
                      seq_len=int((image // patch) ** 2 + 1))
        if isinstance(depths, list):      # Swin: stages of (depth, dim, heads); windows of 7x7
            heads_list = config.get("num_heads") if isinstance(config.get("num_heads"), list) else []
            fields["stages"] = tuple((int(d), hidden * 2 ** i, int(heads_list[i]) if i < len(heads_list) else 1)
                                     for i, d in enumerate(depths))
            fields["window"] = int(_number(config, where, "window_size", hi=1e3) or 7)
            fields["hidden"] = hidden * 2 ** (len(depths) - 1)
            fields["heads"] = float(heads_list[-1]) if heads_list else heads
    elif seq:
        fields["seq_len"] = int(min(seq, 4096 if family == "decoder" else 512))
    if shared:
        fields["shared_ffn"] = shared
    positions = 0 if kind in _GATED or kind in ("t5", "mt5", "gpt_neox") else int(seq or 0)
    fields["params"] = int(transformer_params(layers, hidden, heads, kv_heads, head_dim, ffn, vocab, gated,
                                              experts, tied, fields["lm_head"], family == "seq2seq", positions)
                           + layers * 3 * hidden * shared)
    if "stages" in fields:
        fields["params"] = int(sum(d * 12 * dim * dim for d, dim, _ in fields["stages"]))
    return fields


# shape directive -> ModelEntry field
SHAPE_KEYS = {"layers": "layers", "hidden": "hidden", "heads": "heads", "kv_heads": "kv_heads",
              "head_dim": "head_dim", "intermediate": "ffn", "vocab": "vocab", "experts": "experts",
              "top_k": "top_k", "patch_size": "patch_size"}


def with_shape(entry: Any, spec: Any) -> Any:
    """`entry` with the shape directives of `spec` applied (params recomputed when a shape changed
    and the spec does not state them)."""
    said = {field: getattr(spec, key) for key, field in SHAPE_KEYS.items() if getattr(spec, key) is not None}
    if not said:
        return entry
    entry = replace(entry, **said)
    if "heads" in said and "kv_heads" not in said and entry.kv_heads and entry.kv_heads > entry.heads:
        entry = replace(entry, kv_heads=entry.heads)
    if entry.family == "vit" and entry.patch_size:
        entry = replace(entry, act_bytes=0.0)   # the measured coefficient was for the catalogued shape
    if not spec.params and entry.is_transformer or entry.family == "vit" and not spec.params:
        entry = replace(entry, params=int(transformer_params(
            entry.layers, entry.hidden, entry.heads, entry.kv_heads or entry.heads,
            entry.head_dim or entry.hidden / max(1, entry.heads), entry.ffn or 4 * entry.hidden,
            entry.vocab, entry.gated_mlp, entry.experts, entry.tied, entry.lm_head,
            entry.family == "seq2seq")))
    return entry
