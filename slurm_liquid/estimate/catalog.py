"""Model catalogue: parameter counts and activation coefficients (data in data/models.json).

Names match forgivingly: case, `-`/`_`/`.`, `V2` vs `_v2`, hub prefixes and common suffixes
(`google-bert/bert-large-uncased`, `Llama-2-7b-hf`) all find the same entry. A site file (JSON,
or TOML on Python >= 3.11) adds or replaces entries: `{"models": [{"name": ..., ...}]}`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, fields
from functools import lru_cache
import os
from typing import Any, Mapping

from slurm_liquid.errors import UsageError

# package data next to this file (importlib.resources / pathlib would add imports to the submit path)
DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
FAMILIES = ("cnn", "vit", "detection", "encoder", "decoder", "seq2seq", "rnn", "recsys")
TRANSFORMER_FAMILIES = ("encoder", "decoder", "seq2seq")
# suffixes that name a checkpoint flavour, not a different architecture
_FLAVOURS = ("uncased", "cased", "hf", "chathf", "chat", "instruct", "it", "v0p1", "v0p2", "v0p3",
             "pretrained", "torchvision", "imagenet", "base")


@dataclass(frozen=True)
class ModelEntry:
    name: str
    family: str
    params: int
    aliases: tuple[str, ...] = ()
    builder: str = ""                 # how the profiling harness builds it
    image_size: int = 224             # reference input side (cnn, vit, detection)
    seq_len: int = 512                # default sequence length (transformers, rnn)
    act_bytes: float = 0.0            # fp32 bytes saved for backward per sample at image_size
    act_source: str = ""              # where act_bytes comes from
    # part of act_bytes: the copies of their inputs that in-place hardtanh/ReLU6 saves for backward
    # since PyTorch 1.10 (pytorch/pytorch#95432); jobs on older PyTorch do not hold them
    inplace_copy_bytes: float = 0.0
    layers: float = 0                 # transformer: layers (encoder + decoder for seq2seq)
    hidden: float = 0
    heads: float = 0
    ffn: float = 0
    vocab: int = 0
    gated_mlp: bool = False           # SwiGLU-style MLP (llama, mistral, t5 v1.1)
    flash: bool = False               # attention without the s^2 score matrix saved (older entries)
    attention: str = ""               # default kernel of the usual implementation: eager|sdpa|flash
    kv_heads: float = 0               # grouped-query attention (0 = heads)
    head_dim: float = 0               # 0 = hidden / heads
    experts: int = 1                  # mixture of experts: MLP experts per layer ...
    top_k: int = 1                    # ... and experts per token
    shared_ffn: float = 0             # an always-on shared expert's intermediate size (Qwen-MoE)
    tied: bool = True                 # input embedding shared with the LM head
    dropout: bool | None = None       # trains with dropout (None: not for gated-MLP LLMs)
    # eager attention casts the fp32 softmax output to the compute dtype before its dropout
    # (None: by family, see `downcasts_probs`)
    probs_downcast: bool | None = None
    activation: str = ""              # MLP activation as the config names it (gelu_new: a chain of ops)
    shared_norm: bool = False         # parallel attention + MLP on one layer norm's output (Phi)
    patch_size: int = 0               # ViT patch side (shape-driven vision transformers)
    stages: tuple[tuple[int, float, float], ...] = ()   # Swin: (depth, dim, heads) per stage
    window: int = 0                   # Swin: window side (attention within windows)
    source: str = ""                  # where the shape comes from (config.json URL)
    lm_head: bool = False             # full-vocabulary logits in the loss
    act_scale: float = 1.0            # activations relative to the standard layer formula
    gflops: float = 0.0               # forward GFLOPs per sample at image_size (scaling model)
    hf_config: tuple[tuple[str, Any], ...] = ()
    notes: str = ""

    @property
    def is_transformer(self) -> bool:
        """Activations from the layer formula (language models, and vision transformers given by
        shape rather than a measured coefficient)."""
        return self.family in TRANSFORMER_FAMILIES or (self.family == "vit" and not self.act_bytes
                                                       and bool(self.layers and self.hidden))

    @property
    def default_attention(self) -> str:
        return self.attention or ("flash" if self.flash else "eager")

    @property
    def downcasts_probs(self) -> bool:
        """Whether eager attention drops out 16-bit probabilities (under autocast). In transformers
        5.x the decoders (GPT-2: `.type(value.dtype)`; Llama, Mistral, Qwen2, NeoX, OPT, Falcon, Phi,
        Gemma: `softmax(..., dtype=float32).to(query.dtype)`) and the HF vision transformers (ViT,
        DeiT, Swin) cast before the dropout; BERT, RoBERTa, DistilBERT, BART and T5 apply dropout to
        softmax's fp32 output and the next matmul makes the 16-bit copy."""
        if self.probs_downcast is not None:
            return self.probs_downcast
        return self.family in ("decoder", "vit")

    @property
    def trains_with_dropout(self) -> bool:
        return (not self.gated_mlp) if self.dropout is None else self.dropout

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str) -> "ModelEntry":
        known = {f.name: f.type for f in fields(cls)}
        label = data.get("name", "?")
        label = label if isinstance(label, str) else "?"
        unknown = set(data) - set(known)
        if unknown:
            raise UsageError(f"{where}: model {label[:80]!r}: unknown field(s) "
                             f"{', '.join(sorted(map(str, unknown)))[:200]}")
        values = dict(data)
        try:
            if not isinstance(values.get("aliases", ()), (list, tuple)):
                raise ValueError("aliases must be a list of names")
            values["aliases"] = tuple(values.get("aliases", ()))
            if not isinstance(values.get("hf_config", {}), Mapping):
                raise ValueError("hf_config must be an object")
            values["hf_config"] = tuple(sorted(dict(values.get("hf_config", {})).items()))
            values["stages"] = tuple(tuple(stage) for stage in values.get("stages", ()))
            params = values["params"]
            if isinstance(params, str):
                params = float(params)
            values["params"] = _checked("params", params, "float")
            values["params"] = int(values["params"])
            for f in fields(cls):
                if f.name in values and f.name not in ("params", "hf_config", "stages"):
                    values[f.name] = _checked(f.name, values[f.name], f.type)
                    # a size whose default is positive (image_size, seq_len) divides estimates
                    if isinstance(f.default, (int, float)) and not isinstance(f.default, bool) and f.default > 0 \
                            and not values[f.name] > 0:
                        raise ValueError(f"{f.name} must be positive, not {values[f.name]!r}")
            entry = cls(**values)
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise UsageError(f"{where}: model {label[:80]!r}: {exc}") from None
        if entry.family not in FAMILIES:
            raise UsageError(f"{where}: model {entry.name!r}: family must be one of {', '.join(FAMILIES)}")
        if entry.params <= 0:
            raise UsageError(f"{where}: model {entry.name!r}: params must be positive")
        if not 0 <= entry.inplace_copy_bytes <= entry.act_bytes:
            raise UsageError(f"{where}: model {entry.name!r}: inplace_copy_bytes must be between 0 and act_bytes")
        return entry


def _checked(name: str, value: Any, kind: str) -> Any:
    """`value` of a site-file field as the dataclass's annotation `kind` says; ValueError if not."""
    if kind == "str":
        ok = isinstance(value, str)
    elif kind in ("int", "float"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e30  # not NaN
        if ok and kind == "int":
            value = int(value)
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind.startswith("tuple[str"):
        ok = all(isinstance(v, str) for v in value)
    else:
        ok = True  # a kind this check does not know: the dataclass takes it as it is
    if not ok:
        raise ValueError(f"{name} must be a {kind} (a finite number >= 0 for numbers), not {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def name_key(name: str) -> str:
    """`ResNet-50`, `resnet_50` and `resnet50` -> `resnet50`; drops a hub prefix."""
    base = name.strip().rsplit("/", 1)[-1].lower()
    base = re.sub(r"(?<=\d)\.(?=\d)", "p", base)   # opt-1.3b is not opt-13b
    return re.sub(r"[^a-z0-9]", "", base)


def _keys(name: str) -> list[str]:
    key = name_key(name)
    out = [key]
    changed = True
    while changed:
        changed = False
        for suffix in _FLAVOURS:
            if out[-1].endswith(suffix) and len(out[-1]) > len(suffix) + 2:
                out.append(out[-1][: -len(suffix)])
                changed = True
    return out


def _read(path: str) -> Mapping[str, Any]:
    """The site file as a table; UsageError naming the file for anything else."""
    from slurm_liquid.files import parse_json, read_text

    text = read_text(path, "site")
    if path.endswith(".toml"):
        try:
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10: the same parser, as the tomli package
                import tomli as tomllib
            data = tomllib.loads(text)
        except (ValueError, ImportError, RecursionError) as exc:
            reason = "nested too deeply" if isinstance(exc, RecursionError) else exc
            raise UsageError(f"site file {path}: not valid TOML: {reason}") from None
    else:
        data = parse_json(text, f"site file {path}")
    if not isinstance(data, Mapping):
        raise UsageError(f"site file {path}: must be an object with models, gpus and/or defaults, "
                         f"not {type(data).__name__ if data is not None else 'null'}")
    return data


def _data(name: str) -> Any:
    with open(os.path.join(DATA_DIR, name), encoding="utf-8") as handle:
        return json.load(handle)


@lru_cache(maxsize=1)
def _generic_names() -> tuple[tuple[str, str], ...]:
    return tuple((name_key(k), v) for k, v in _data("models.json").get("generic", {}).items())


@dataclass
class Catalog:
    entries: dict[str, ModelEntry] = field(default_factory=dict)
    index: dict[str, str] = field(default_factory=dict)
    # generic family name -> its base member (shipped data; site entries of that name win)
    generic: dict[str, str] = field(default_factory=lambda: dict(_generic_names()))

    def generic_base(self, name: str) -> str | None:
        """The base member a generic family name stands for (`efficientnet` -> efficientnet_b0)."""
        for key in _keys(name):
            if key in self.generic and key not in self.index:
                return self.generic[key]
        return None

    def add(self, entry: ModelEntry) -> None:
        self.entries[entry.name] = entry
        for alias in (entry.name, *entry.aliases):
            self.index[name_key(alias)] = entry.name

    def find(self, name: str) -> ModelEntry | None:
        for key in _keys(name):
            if key in self.index:
                return self.entries[self.index[key]]
        base = self.generic_base(name)
        return self.entries.get(base) if base else None

    def lookup(self, name: str) -> ModelEntry:
        """The entry for `name`, or a UsageError listing close matches."""
        entry = self.find(name)
        if entry is not None:
            return entry
        key = name_key(name)
        import difflib  # only for the error message

        close = difflib.get_close_matches(key, list(self.index), n=4, cutoff=0.5)
        names = list(dict.fromkeys(self.index[k] for k in close))
        hint = f"; close matches: {', '.join(names)}" if names else ""
        raise UsageError(f"model: unknown model {name!r}{hint}; or give params=<count> "
                         "family=<cnn|encoder|decoder|...>, or add it in a site file")

    def names(self) -> list[str]:
        return sorted(self.entries)


@lru_cache(maxsize=8)
def load_catalog(site: str | None = None) -> Catalog:
    """The shipped catalogue, plus a site file's `models` when given."""
    catalog = Catalog()
    shipped = _data("models.json")
    for item in shipped["models"]:
        catalog.add(ModelEntry.from_mapping(item, "models.json"))
    if site:
        models = _read(site).get("models", [])
        if not isinstance(models, list):
            raise UsageError(f"site file {site}: models must be a list of objects")
        for item in models:
            if not isinstance(item, Mapping):
                raise UsageError(f"site file {site}: each entry of models must be a table/object")
            catalog.add(ModelEntry.from_mapping(item, f"site file {site}"))
    return catalog


def site_section(site: str | None, section: str) -> Mapping[str, Any]:
    """One section (e.g. `gpus`) of the site file, empty without one."""
    if not site:
        return {}
    value = _read(site).get(section, {})
    if not isinstance(value, Mapping):
        raise UsageError(f"site file {site}: {section} must be a table/object")
    return value
