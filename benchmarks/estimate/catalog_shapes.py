"""Write the shapes of popular open model families into slurm_liquid/estimate/data/models.json.

    python benchmarks/estimate/catalog_shapes.py      # idempotent: replaces entries of these names

Each row is the architecture numbers of the model's public config.json (the `source` URL of each
entry); the parameter count is computed from the shape by the estimator's own formula
(`slurm_liquid.estimate.shape.transformer_params`), so a shape given by directives or by a
config.json is sized exactly like the shipped entry. Vision entries without a measured activation
coefficient (Swin) use the layer formula over their stages.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from slurm_liquid.estimate.shape import transformer_params  # noqa: E402

HF = "https://huggingface.co/{}/blob/main/config.json"

# name, hub id, family, layers, hidden, heads, kv_heads, head_dim, ffn, vocab, gated, tied,
# experts, top_k, seq_len, attention, aliases
DECODERS = [
    ("llama-3.2-1b", "meta-llama/Llama-3.2-1B", 16, 2048, 32, 8, 64, 8192, 128256, True, True, 1, 1, 8192, ["llama3.2-1b"]),
    ("llama-3.2-3b", "meta-llama/Llama-3.2-3B", 28, 3072, 24, 8, 128, 8192, 128256, True, True, 1, 1, 8192, ["llama3.2-3b"]),
    ("llama-3.1-405b", "meta-llama/Llama-3.1-405B", 126, 16384, 128, 8, 128, 53248, 128256, True, False, 1, 1, 8192, ["llama3.1-405b", "llama-3-405b"]),
    ("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1", 32, 4096, 32, 8, 128, 14336, 32000, True, False, 8, 2, 4096, ["mixtral", "mixtral-8x7b-instruct"]),
    ("mixtral-8x22b", "mistralai/Mixtral-8x22B-v0.1", 56, 6144, 48, 8, 128, 16384, 32768, True, False, 8, 2, 4096, []),
    ("mistral-nemo-12b", "mistralai/Mistral-Nemo-Base-2407", 40, 5120, 32, 8, 128, 14336, 131072, True, False, 1, 1, 4096, ["mistral-nemo"]),
    ("qwen2-0.5b", "Qwen/Qwen2-0.5B", 24, 896, 14, 2, 64, 4864, 151936, True, True, 1, 1, 4096, ["qwen2.5-0.5b"]),
    ("qwen2-1.5b", "Qwen/Qwen2-1.5B", 28, 1536, 12, 2, 128, 8960, 151936, True, True, 1, 1, 4096, ["qwen2.5-1.5b"]),
    ("qwen2-7b", "Qwen/Qwen2-7B", 28, 3584, 28, 4, 128, 18944, 152064, True, False, 1, 1, 4096, ["qwen2.5-7b", "qwen"]),
    ("qwen2-72b", "Qwen/Qwen2-72B", 80, 8192, 64, 8, 128, 29568, 152064, True, False, 1, 1, 4096, ["qwen2.5-72b"]),
    ("qwen2.5-3b", "Qwen/Qwen2.5-3B", 36, 2048, 16, 2, 128, 11008, 151936, True, True, 1, 1, 4096, []),
    ("qwen2.5-14b", "Qwen/Qwen2.5-14B", 48, 5120, 40, 8, 128, 13824, 152064, True, False, 1, 1, 4096, []),
    ("qwen2.5-32b", "Qwen/Qwen2.5-32B", 64, 5120, 40, 8, 128, 27648, 152064, True, False, 1, 1, 4096, []),
    ("qwen3-0.6b", "Qwen/Qwen3-0.6B", 28, 1024, 16, 8, 128, 3072, 151936, True, True, 1, 1, 4096, []),
    ("qwen3-1.7b", "Qwen/Qwen3-1.7B", 28, 2048, 16, 8, 128, 6144, 151936, True, True, 1, 1, 4096, []),
    ("qwen3-4b", "Qwen/Qwen3-4B", 36, 2560, 32, 8, 128, 9728, 151936, True, True, 1, 1, 4096, []),
    ("qwen3-8b", "Qwen/Qwen3-8B", 36, 4096, 32, 8, 128, 12288, 151936, True, False, 1, 1, 4096, ["qwen3"]),
    ("qwen3-14b", "Qwen/Qwen3-14B", 40, 5120, 40, 8, 128, 17408, 151936, True, False, 1, 1, 4096, []),
    ("qwen3-32b", "Qwen/Qwen3-32B", 64, 5120, 64, 8, 128, 25600, 151936, True, False, 1, 1, 4096, []),
    ("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", 48, 2048, 32, 4, 128, 768, 151936, True, False, 128, 8, 4096, ["qwen3-moe"]),
    ("gemma-2b", "google/gemma-2b", 18, 2048, 8, 1, 256, 16384, 256000, True, True, 1, 1, 8192, ["gemma"]),
    ("gemma-7b", "google/gemma-7b", 28, 3072, 16, 16, 256, 24576, 256000, True, True, 1, 1, 8192, []),
    ("gemma-2-2b", "google/gemma-2-2b", 26, 2304, 8, 4, 256, 9216, 256000, True, True, 1, 1, 8192, ["gemma2-2b"]),
    ("gemma-2-9b", "google/gemma-2-9b", 42, 3584, 16, 8, 256, 14336, 256000, True, True, 1, 1, 8192, ["gemma2-9b", "gemma-2"]),
    ("gemma-2-27b", "google/gemma-2-27b", 46, 4608, 32, 16, 128, 36864, 256000, True, True, 1, 1, 8192, ["gemma2-27b"]),
    ("phi-3-mini", "microsoft/Phi-3-mini-4k-instruct", 32, 3072, 32, 32, 96, 8192, 32064, True, False, 1, 1, 4096, ["phi-3", "phi3-mini", "phi-3-mini-4k"]),
    ("phi-3-medium", "microsoft/Phi-3-medium-4k-instruct", 40, 5120, 40, 10, 128, 17920, 32064, True, False, 1, 1, 4096, ["phi3-medium"]),
]
# plain (GELU) MLP decoders: name, hub id, layers, hidden, heads, ffn, vocab, tied, seq, positions, aliases
PLAIN_DECODERS = [
    ("phi-1.5", "microsoft/phi-1_5", 24, 2048, 32, 8192, 51200, False, 2048, 0, ["phi-1_5", "phi15"]),
    ("phi-2", "microsoft/phi-2", 32, 2560, 32, 10240, 51200, False, 2048, 0, ["phi"]),
    ("pythia-70m", "EleutherAI/pythia-70m", 6, 512, 8, 2048, 50304, False, 2048, 0, []),
    ("pythia-160m", "EleutherAI/pythia-160m", 12, 768, 12, 3072, 50304, False, 2048, 0, []),
    ("pythia-410m", "EleutherAI/pythia-410m", 24, 1024, 16, 4096, 50304, False, 2048, 0, []),
    ("pythia-1b", "EleutherAI/pythia-1b", 16, 2048, 8, 8192, 50304, False, 2048, 0, []),
    ("pythia-1.4b", "EleutherAI/pythia-1.4b", 24, 2048, 16, 8192, 50304, False, 2048, 0, ["pythia"]),
    ("pythia-2.8b", "EleutherAI/pythia-2.8b", 32, 2560, 32, 10240, 50304, False, 2048, 0, []),
    ("pythia-6.9b", "EleutherAI/pythia-6.9b", 32, 4096, 32, 16384, 50432, False, 2048, 0, []),
    ("pythia-12b", "EleutherAI/pythia-12b", 36, 5120, 40, 20480, 50688, False, 2048, 0, []),
    ("gpt-neox-20b", "EleutherAI/gpt-neox-20b", 44, 6144, 64, 24576, 50432, False, 2048, 0, ["gpt-neox", "neox-20b"]),
    ("opt-125m", "facebook/opt-125m", 12, 768, 12, 3072, 50272, True, 2048, 2050, []),
    ("opt-350m", "facebook/opt-350m", 24, 1024, 16, 4096, 50272, True, 2048, 2050, []),
    ("opt-1.3b", "facebook/opt-1.3b", 24, 2048, 32, 8192, 50272, True, 2048, 2050, ["opt"]),
    ("opt-2.7b", "facebook/opt-2.7b", 32, 2560, 32, 10240, 50272, True, 2048, 2050, []),
    ("opt-6.7b", "facebook/opt-6.7b", 32, 4096, 32, 16384, 50272, True, 2048, 2050, []),
    ("opt-13b", "facebook/opt-13b", 40, 5120, 40, 20480, 50272, True, 2048, 2050, []),
    ("opt-30b", "facebook/opt-30b", 48, 7168, 56, 28672, 50272, True, 2048, 2050, []),
    ("opt-66b", "facebook/opt-66b", 64, 9216, 72, 36864, 50272, True, 2048, 2050, []),
]
# encoders: name, hub id, layers, hidden, heads, ffn, vocab, attention, aliases
ENCODERS = [
    ("distilbert-base", "distilbert/distilbert-base-uncased", 6, 768, 12, 3072, 30522, "sdpa", ["distilbert", "distilbert-base-uncased", "distilbert-base-cased"]),
    ("deberta-v3-base", "microsoft/deberta-v3-base", 12, 768, 12, 3072, 128100, "eager", ["deberta", "deberta-v3"]),
    ("deberta-v3-large", "microsoft/deberta-v3-large", 24, 1024, 16, 4096, 128100, "eager", []),
    ("deberta-v3-small", "microsoft/deberta-v3-small", 6, 768, 12, 3072, 128100, "eager", []),
]
# flan-T5 (v1.1 layout: gated-GELU, untied head): name, hub id, layers per stack, d_model, heads, d_kv, d_ff
FLAN_T5 = [
    ("flan-t5-small", "google/flan-t5-small", 8, 512, 6, 64, 1024, ["flan-t5"]),
    ("flan-t5-base", "google/flan-t5-base", 12, 768, 12, 64, 2048, []),
    ("flan-t5-large", "google/flan-t5-large", 24, 1024, 16, 64, 2816, []),
    ("flan-t5-xl", "google/flan-t5-xl", 24, 2048, 32, 64, 5120, []),
    ("flan-t5-xxl", "google/flan-t5-xxl", 24, 4096, 64, 64, 10240, []),
]
# Swin (hierarchical ViT, 7x7 windows, patch 4): name, hub id, depths, embed dim, heads, params
SWIN = [
    ("swin-t", "microsoft/swin-tiny-patch4-window7-224", (2, 2, 6, 2), 96, (3, 6, 12, 24), 28288354, ["swin", "swin_t", "swin-tiny"]),
    ("swin-s", "microsoft/swin-small-patch4-window7-224", (2, 2, 18, 2), 96, (3, 6, 12, 24), 49606258, ["swin_s", "swin-small"]),
    ("swin-b", "microsoft/swin-base-patch4-window7-224", (2, 2, 18, 2), 128, (4, 8, 16, 32), 87768224, ["swin_b", "swin-base"]),
    ("swin-l", "microsoft/swin-large-patch4-window7-224", (2, 2, 18, 2), 192, (6, 12, 24, 48), 196532476, ["swin_l", "swin-large"]),
]
# catalogue entries of earlier versions whose Hugging Face implementation now defaults to SDPA
SDPA_BY_DEFAULT = {"bert-base", "bert-large", "roberta-base", "roberta-large", "gpt2", "gpt2-medium",
                   "gpt2-large", "gpt2-xl"}
# MLP activation `gelu_new`: transformers' NewGELUActivation, a chain of Python ops (config.json's
# activation_function). Phi-1.5/2 name gelu_new too, but their catalogue rows (and published
# peaks) are LitGPT's, which calls torch's fused gelu(approximate="tanh"): left fused here
GELU_NEW = {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"}
# generic names -> the family's base member (resolved with a note)
GENERIC = {"resnet": "resnet50", "efficientnet": "efficientnet_b0", "inception": "inception_v3",
           "mobilenet": "mobilenet_v2", "densenet": "densenet121", "vgg": "vgg16", "convnext": "convnext_tiny",
           "vit": "vit_b_16", "yolo": "yolov5s", "llama": "llama-3-8b", "llama-2": "llama-2-7b",
           "llama-3": "llama-3-8b", "t5": "t5-base", "gpt": "gpt2", "qwen2.5": "qwen2-7b",
           "qwen-2.5": "qwen2-7b", "gemma-2b-it": "gemma-2b", "opt": "opt-1.3b", "mistral": "mistral-7b"}


def entries() -> list[dict]:
    out = []
    for (name, hub, layers, hidden, heads, kv, hd, ffn, vocab, gated, tied, experts, top_k, seq,
         aliases) in DECODERS:
        params = transformer_params(layers, hidden, heads, kv, hd, ffn, vocab, gated, experts, tied)
        out.append(dict(name=name, family="decoder", params=int(params), aliases=[hub, *aliases],
                        builder="hf:AutoConfig/AutoModelForCausalLM", seq_len=seq, layers=layers,
                        hidden=hidden, heads=heads, kv_heads=kv, head_dim=hd, ffn=ffn, vocab=vocab,
                        gated_mlp=gated, tied=tied, experts=experts, top_k=top_k, lm_head=True,
                        attention="sdpa", source=HF.format(hub)))
    for name, hub, layers, hidden, heads, ffn, vocab, tied, seq, positions, aliases in PLAIN_DECODERS:
        params = transformer_params(layers, hidden, heads, heads, hidden / heads, ffn, vocab, False, 1,
                                    tied, positions=positions)
        out.append(dict(name=name, family="decoder", params=int(params), aliases=[hub, *aliases],
                        builder="hf:AutoConfig/AutoModelForCausalLM", seq_len=seq, layers=layers,
                        hidden=hidden, heads=heads, ffn=ffn, vocab=vocab, tied=tied, lm_head=True,
                        attention="sdpa", dropout=name.startswith("opt"), shared_norm=name.startswith("phi"),
                        source=HF.format(hub)))
    for name, hub, layers, hidden, heads, ffn, vocab, attention, aliases in ENCODERS:
        params = transformer_params(layers, hidden, heads, heads, hidden / heads, ffn, vocab, False,
                                    lm_head=False, positions=512)
        out.append(dict(name=name, family="encoder", params=int(params), aliases=[hub, *aliases],
                        builder="hf:AutoConfig/AutoModelForSequenceClassification", seq_len=512,
                        layers=layers, hidden=hidden, heads=heads, ffn=ffn, vocab=vocab, lm_head=False,
                        attention=attention, act_scale=1.3 if name.startswith("deberta") else 1.0,
                        source=HF.format(hub),
                        notes="DeBERTa's disentangled attention adds content-to-position and "
                              "position-to-content score matrices (act_scale 1.3, analytic)"
                              if name.startswith("deberta") else ""))
    for name, hub, layers, d_model, heads, d_kv, d_ff, aliases in FLAN_T5:
        params = transformer_params(2 * layers, d_model, heads, heads, d_kv, d_ff, 32128, True, 1, False,
                                    seq2seq=True)
        out.append(dict(name=name, family="seq2seq", params=int(params), aliases=[hub, *aliases],
                        builder="hf:T5Config/T5ForConditionalGeneration", seq_len=512, layers=2 * layers,
                        hidden=d_model, heads=heads, head_dim=d_kv, ffn=d_ff, vocab=32128, gated_mlp=True,
                        dropout=True, tied=False, lm_head=True, attention="eager", source=HF.format(hub)))
    for name, hub, depths, dim, heads, params, aliases in SWIN:
        stages = [[d, dim * 2 ** i, h] for i, (d, h) in enumerate(zip(depths, heads))]
        out.append(dict(name=name, family="vit", params=params, aliases=[hub, *aliases],
                        builder="hf:SwinConfig/SwinForImageClassification", image_size=224, patch_size=4,
                        window=7, stages=stages, layers=sum(depths), hidden=dim * 8, heads=heads[-1],
                        ffn=4 * dim * 8, vocab=0, dropout=False, attention="eager", source=HF.format(hub),
                        act_source="layer formula over the stages (windowed attention), analytic"))
    return out


def main() -> int:
    path = ROOT / "slurm_liquid" / "estimate" / "data" / "models.json"
    data = json.loads(path.read_text())
    new = entries()
    names = {e["name"] for e in new}
    data["models"] = [m for m in data["models"] if m["name"] not in names] + new
    for model in data["models"]:       # older entries: grouped-query heads and the default kernel
        config = model.get("hf_config", {})
        if "num_key_value_heads" in config:
            model["kv_heads"] = config["num_key_value_heads"]
        if model["name"] in SDPA_BY_DEFAULT:
            model["attention"] = "sdpa"   # transformers >= 4.36-4.41 use SDPA for these by default
        if model["name"] in GELU_NEW:
            model["activation"] = "gelu_new"
    data["generic"] = GENERIC
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{len(new)} shaped entries, {len(GENERIC)} generic names -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
