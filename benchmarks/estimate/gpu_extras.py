#!/usr/bin/env python3
"""Measured GPU peaks for the jobs the estimator now claims to model, beside its estimates.

Cases (issue 20, item 4): LoRA via peft on a Llama-2-7B-shaped decoder (q,v and all-linear, with and
without gradient checkpointing), eager vs SDPA attention on GPT-2 medium and BERT-large, full fine-tune
of GPT-2 large with and without checkpointing, ViT-L/16 under bf16 autocast, and a 7B inference
forward over an 8k prompt with the KV cache. Every model is built from its config with random weights
(no download). Each case runs in its own child process (one CUDA context, one NVML per-process
reading, and an OOM or crash stays in that case) with a timeout, inside an overall time budget.

    # on a GPU machine (torch, transformers, peft; pynvml from nvidia-ml-py):
    PYTHONPATH=. python3 benchmarks/estimate/gpu_extras.py              # ~3-4 min on an H200
    # here, without a GPU: every case path end to end on tiny configs, one step
    PYTHONPATH=. python3 benchmarks/estimate/gpu_extras.py --tiny --device cpu
    # estimates again for measurements taken elsewhere (no torch needed):
    PYTHONPATH=. python3 benchmarks/estimate/gpu_extras.py --from-json benchmarks/estimate/gpu/NAME.json

The parent needs neither torch nor CUDA: it samples NVML (if present) while a child runs, then asks
`slurm_liquid.estimate.api.estimate` for the same job, twice: by catalog name (what a user types) and
by the config.json the child built the model from (`hf-config=`). Writes benchmarks/estimate/gpu/
<gpu>.{csv,md,json}, copied to $OUT when that is set.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MIB = 1 << 20
RESULT_TAG = "GPU_EXTRAS_RESULT "

# Llama-2-7B (meta-llama/Llama-2-7b-hf config.json)
LLAMA_7B = dict(kind="llama", hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                num_key_value_heads=32, intermediate_size=11008, vocab_size=32000,
                max_position_embeddings=4096)
GPT2_MEDIUM = dict(kind="gpt2", n_embd=1024, n_layer=24, n_head=16, vocab_size=50257, n_positions=1024)
GPT2_LARGE = dict(kind="gpt2", n_embd=1280, n_layer=36, n_head=20, vocab_size=50257, n_positions=1024)
BERT_LARGE = dict(kind="bert", hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                  intermediate_size=4096, vocab_size=30522, max_position_embeddings=512)
VIT_L16 = dict(kind="vit", hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
               intermediate_size=4096, image_size=224, patch_size=16, num_labels=1000)

# Tiny stand-ins of each shape, so that --tiny exercises the same code on a CPU in seconds.
TINY = {
    "llama": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                  intermediate_size=128, vocab_size=256, max_position_embeddings=256),
    "gpt2": dict(n_embd=64, n_layer=2, n_head=4, vocab_size=256, n_positions=256),
    "bert": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                 vocab_size=256, max_position_embeddings=256),
    "vit": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                image_size=32, patch_size=8, num_labels=10),
}


@dataclass(frozen=True)
class Case:
    name: str
    catalog: str                   # the estimator's catalog name for the full-size model
    shape: dict[str, Any]          # HF config fields (+ "kind")
    micro_batch: int
    seq_len: int = 0               # 0 for images
    precision: str = "bf16"        # estimator spelling: bf16 = autocast, bf16-pure = bf16 weights, no autocast
    attention: str = "sdpa"
    checkpointing: bool = False
    adapter: str = "none"          # lora
    targets: str = ""              # "q,v" or "all-linear"
    rank: int = 16
    mode: str = "train"
    note: str = ""

    def tiny(self) -> "Case":
        shape = {"kind": self.shape["kind"], **TINY[self.shape["kind"]]}
        return dataclasses.replace(self, shape=shape, micro_batch=min(self.micro_batch, 2),
                                   seq_len=min(self.seq_len, 64), rank=min(self.rank, 4))

    def spec(self) -> dict[str, Any]:
        """The job as `slurm-liquid estimate` keys (without the model, which the caller adds)."""
        spec: dict[str, Any] = {"micro-batch": self.micro_batch, "gpus": 1, "precision": self.precision,
                                "attention": self.attention, "mode": self.mode}
        if self.seq_len:
            spec["seq-len"] = self.seq_len
        if self.shape["kind"] == "vit":
            spec["image-size"] = self.shape["image_size"]
        if self.mode == "train":
            spec["optimizer"] = "adamw"
            spec["checkpointing"] = "true" if self.checkpointing else "false"
        if self.adapter != "none":
            spec["adapter"] = self.adapter
            spec["rank"] = self.rank
        return spec


CASES: list[Case] = [
    Case("lora-qv-7b", "llama-2-7b", LLAMA_7B, 1, 512, adapter="lora", targets="q,v",
         note="bf16 base, fp32 adapters, autocast bf16"),
    Case("lora-qv-7b-ckpt", "llama-2-7b", LLAMA_7B, 1, 512, adapter="lora", targets="q,v", checkpointing=True),
    Case("lora-all-7b", "llama-2-7b", LLAMA_7B, 1, 512, adapter="lora", targets="all-linear",
         note="estimator has no key for the target modules"),
    Case("lora-all-7b-ckpt", "llama-2-7b", LLAMA_7B, 1, 512, adapter="lora", targets="all-linear",
         checkpointing=True),
    Case("gpt2m-eager-b4", "gpt2-medium", GPT2_MEDIUM, 4, 1024, attention="eager"),
    Case("gpt2m-sdpa-b4", "gpt2-medium", GPT2_MEDIUM, 4, 1024, attention="sdpa"),
    Case("gpt2m-eager-b8", "gpt2-medium", GPT2_MEDIUM, 8, 1024, attention="eager"),
    Case("gpt2m-sdpa-b8", "gpt2-medium", GPT2_MEDIUM, 8, 1024, attention="sdpa"),
    Case("bertl-eager-b8", "bert-large", BERT_LARGE, 8, 512, attention="eager", note="masked-LM head"),
    Case("bertl-sdpa-b8", "bert-large", BERT_LARGE, 8, 512, attention="sdpa", note="masked-LM head"),
    Case("gpt2l-full-b4", "gpt2-large", GPT2_LARGE, 4, 1024, note="fp32 weights, AdamW, autocast bf16"),
    Case("gpt2l-full-b4-ckpt", "gpt2-large", GPT2_LARGE, 4, 1024, checkpointing=True),
    Case("vitl16-b32", "vit-l-16", VIT_L16, 32, note="transformers ViT, autocast bf16"),
    Case("vitl16-b64", "vit-l-16", VIT_L16, 64),
    Case("llama7b-infer-8k", "llama-2-7b", {**LLAMA_7B, "max_position_embeddings": 8192}, 1, 8192,
         precision="bf16-pure", mode="inference", note="one forward over the prompt, use_cache, last logit"),
]


# ---------------------------------------------------------------------------------------------- child
def _build(case: Case, device: str) -> tuple[Any, str, dict[str, Any]]:
    """The model on `device` with random weights; returns (model, attention used, config dict)."""
    import torch
    import transformers

    kind = case.shape["kind"]
    fields = {k: v for k, v in case.shape.items() if k != "kind"}
    config_cls, model_cls = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "gpt2": (transformers.GPT2Config, transformers.GPT2LMHeadModel),
        "bert": (transformers.BertConfig, transformers.BertForMaskedLM),
        "vit": (transformers.ViTConfig, transformers.ViTForImageClassification),
    }[kind]
    config = config_cls(**fields)
    # Dropout off: its masks are memory the estimator does not claim to model for these runs, and
    # current fine-tuning recipes for Llama use none.
    for name in ("attention_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop",
                 "hidden_dropout_prob", "attention_probs_dropout_prob"):
        if hasattr(config, name):
            setattr(config, name, 0.0)
    config.use_cache = case.mode == "inference"
    # 7B: bf16 weights made directly on the GPU (CPU init of 6.7B fp32 weights takes minutes).
    weights_bf16 = case.adapter != "none" or case.precision == "bf16-pure"
    old_dtype = torch.get_default_dtype()
    try:
        if weights_bf16:
            torch.set_default_dtype(torch.bfloat16)
        with torch.device(device):
            try:
                model = model_cls._from_config(config, attn_implementation=case.attention)
            except (TypeError, ValueError, ImportError) as exc:  # old transformers or no SDPA for this model
                print(f"attn_implementation={case.attention} refused ({exc}); default used", file=sys.stderr)
                model = model_cls(config)
    finally:
        torch.set_default_dtype(old_dtype)
    used = getattr(model.config, "_attn_implementation", None) or "eager"
    return model, used, config.to_dict()


def _batch(case: Case, model: Any, device: str) -> dict[str, Any]:
    import torch

    if case.shape["kind"] == "vit":
        size = model.config.image_size
        return {"pixel_values": torch.randn(case.micro_batch, 3, size, size, device=device),
                "labels": torch.randint(0, model.config.num_labels, (case.micro_batch,), device=device)}
    ids = torch.randint(0, model.config.vocab_size, (case.micro_batch, case.seq_len), device=device)
    return {"input_ids": ids} if case.mode == "inference" else {"input_ids": ids, "labels": ids}


def run_child(case: Case, device: str, steps: int, config_dir: str) -> dict[str, Any]:
    import torch

    started = time.monotonic()
    cuda = device.startswith("cuda")
    model, used, config = _build(case, device)
    Path(config_dir, "config.json").write_text(json.dumps(config, default=str))
    out: dict[str, Any] = {"attention_used": used, "torch": torch.__version__}
    try:
        import transformers
        out["transformers"] = transformers.__version__
    except ImportError:
        pass
    batch = _batch(case, model, device)
    autocast = torch.autocast(device_type="cuda" if cuda else "cpu", dtype=torch.bfloat16,
                              enabled=case.precision == "bf16")
    if case.mode == "inference":
        import inspect

        model.eval()
        params = inspect.signature(model.forward).parameters
        # what generate() does for the prompt: logits for the last position only
        extra = ({"logits_to_keep": 1} if "logits_to_keep" in params
                 else {"num_logits_to_keep": 1} if "num_logits_to_keep" in params else {})
        with torch.inference_mode():
            for _ in range(steps):
                result = model(**batch, use_cache=True, **extra)
                del result
    else:
        if case.checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if case.adapter != "none":
            import peft

            targets: Any = "all-linear" if case.targets == "all-linear" else ["q_proj", "v_proj"]
            lora = peft.LoraConfig(r=case.rank, lora_alpha=2 * case.rank, lora_dropout=0.0,
                                   target_modules=targets, task_type="CAUSAL_LM")
            model = peft.get_peft_model(model, lora)  # adapters in fp32 (peft's default upcast)
            out["trainable_params"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
            out["peft"] = peft.__version__
        model.train()
        optim = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
        for _ in range(steps):
            with autocast:
                loss = model(**batch).loss
            loss.backward()
            optim.step()
            optim.zero_grad(set_to_none=True)
            del loss
    if cuda:
        torch.cuda.synchronize()
        out["reserved_mib"] = round(torch.cuda.max_memory_reserved() / MIB, 1)
        out["allocated_mib"] = round(torch.cuda.max_memory_allocated() / MIB, 1)
    out["params"] = sum(p.numel() for p in model.parameters())
    # what the weights really were stored in (bf16 base for LoRA/inference, fp32 for full fine-tune)
    out["weight_dtype"] = str(next(p for p in model.parameters() if not p.requires_grad or
                                   case.adapter == "none").dtype).replace("torch.", "")
    import resource

    out["rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # KiB on Linux
    out["child_s"] = round(time.monotonic() - started, 2)
    return out


def child_main(args: argparse.Namespace) -> int:
    case = {c.name: c for c in CASES}[args.child]
    case = case.tiny() if args.tiny else case
    try:
        result = run_child(case, args.device, args.steps, args.config_dir)
        code = 0
    except BaseException as exc:  # an OOM is a result too; the parent records the text
        result, code = {"error": f"{type(exc).__name__}: {str(exc)[:400]}"}, 1
        try:
            import torch
            if torch.cuda.is_available():
                result["reserved_mib"] = round(torch.cuda.max_memory_reserved() / MIB, 1)
                result["allocated_mib"] = round(torch.cuda.max_memory_allocated() / MIB, 1)
        except Exception:
            pass
    print(RESULT_TAG + json.dumps(result), flush=True)
    return code


# ---------------------------------------------------------------------------------------------- parent
class NvmlSampler:
    """Peak GPU memory of one child while it runs: its own NVML process entry, and the card's used
    memory over the baseline taken before the child started (the fallback where PIDs do not match,
    e.g. in a container with its own PID namespace)."""

    def __init__(self, index: int = 0, period: float = 0.05) -> None:
        import pynvml  # nvidia-ml-py

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.period = period
        self.name = pynvml.nvmlDeviceGetName(self.handle)
        self.name = self.name.decode() if isinstance(self.name, bytes) else self.name

    def used(self) -> int:
        return int(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used)

    def proc_bytes(self, pid: int) -> int | None:
        try:
            procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
        except self.nvml.NVMLError:
            return None
        for p in procs:
            if p.pid == pid and p.usedGpuMemory is not None:
                return int(p.usedGpuMemory)
        return None

    def watch(self, proc: subprocess.Popen, peaks: dict[str, int | None]) -> threading.Thread:
        baseline = self.used()

        def loop() -> None:
            while proc.poll() is None:
                own = self.proc_bytes(proc.pid)
                if own is not None:
                    peaks["proc"] = max(peaks.get("proc") or 0, own)
                peaks["card"] = max(peaks.get("card") or 0, self.used() - baseline)
                time.sleep(self.period)

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        return thread


def measure(case: Case, args: argparse.Namespace, sampler: NvmlSampler | None, timeout: float,
            workdir: Path) -> dict[str, Any]:
    config_dir = workdir / case.name
    config_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", case.name, "--device", args.device,
           "--steps", str(args.steps), "--config-dir", str(config_dir)] + (["--tiny"] if args.tiny else [])
    peaks: dict[str, int | None] = {}
    started = time.monotonic()
    # own session: a timeout kills the child and anything it started, nothing else
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    thread = sampler.watch(proc, peaks) if sampler else None
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        stdout, stderr = proc.communicate()
        stdout += RESULT_TAG + json.dumps({"error": f"timeout after {timeout:.0f} s"}) + "\n"
    if thread:
        thread.join(timeout=2)
    row: dict[str, Any] = {"wall_s": round(time.monotonic() - started, 1), "exit": proc.returncode}
    lines = [ln for ln in stdout.splitlines() if ln.startswith(RESULT_TAG)]
    if lines:
        row.update(json.loads(lines[-1][len(RESULT_TAG):]))
    else:
        row["error"] = f"no result (exit {proc.returncode}): {stderr.strip()[-400:]}"
    if peaks.get("proc"):
        row["nvml_proc_mib"] = round(peaks["proc"] / MIB, 1)
    if peaks.get("card"):
        row["nvml_card_mib"] = round(peaks["card"] / MIB, 1)
    config = config_dir / "config.json"
    if config.exists():
        row["config_json"] = json.loads(config.read_text())
    return row


def ask_estimator(case: Case, row: dict[str, Any], gpu_type: str, tiny: bool) -> dict[str, Any]:
    """The estimator's answer for the same job: by catalog name (not for tiny models, which the
    catalog does not hold) and by the config.json the model was built from."""
    try:
        from slurm_liquid.estimate.api import estimate
        from slurm_liquid.estimate.gpus import load_gpu_table
        from slurm_liquid.jobspec import JobSpec
    except ImportError as exc:
        return {"est_error": f"estimator not importable: {exc}"}
    try:
        load_gpu_table(None).lookup(gpu_type)
    except Exception:  # a card the table does not know: estimate for an H200, say so
        row.setdefault("notes", []).append(f"gpu {gpu_type!r} unknown to the estimator; h200 used")
        gpu_type = "h200"
    spec = case.spec()
    if row.get("attention_used") and row["attention_used"] in ("eager", "sdpa", "flash_attention_2"):
        spec["attention"] = {"flash_attention_2": "flash"}.get(row["attention_used"], row["attention_used"])
    spec["gpu-type"] = gpu_type
    out: dict[str, Any] = {"spec": " ".join(f"{k}={v}" for k, v in spec.items())}
    ways: list[tuple[str, dict[str, Any]]] = []
    if not tiny:
        ways.append(("catalog", {"model": case.catalog}))
    if row.get("config_json"):
        path = Path(tempfile.mkdtemp(prefix="gpu_extras_")) / "config.json"
        path.write_text(json.dumps(row["config_json"]))
        ways.append(("hfconfig", {"hf-config": str(path)}))
    for way, model in ways:
        try:
            est = estimate(JobSpec.from_values({**model, **spec}), correction="none").to_json()
            out[f"est_{way}_mib"] = est["gpu_mem_mib"]
            out[f"est_{way}_context_mib"] = est["breakdown_mib"].get("context", 0)
            out[f"est_{way}_breakdown"] = est["breakdown_mib"]
        except Exception as exc:  # a spec the estimator refuses is a finding, not a crash
            out[f"est_{way}_error"] = f"{type(exc).__name__}: {exc}"
    return out


def _rel(est: float | None, measured: float | None) -> float | None:
    return round(est / measured - 1, 3) if est and measured else None


FIELDS = ["case", "spec", "targets", "attention_used", "weight_dtype", "params", "trainable_params",
          "reserved_mib",
          "allocated_mib", "nvml_mib", "nvml_source", "est_mib", "est_context_mib", "err_vs_reserved",
          "err_vs_nvml", "est_hfconfig_mib", "err_hfconfig_vs_nvml", "rss_mib", "wall_s", "error", "note"]


def to_row(case: Case, m: dict[str, Any]) -> dict[str, Any]:
    """One CSV row. The estimate counts the CUDA context; max_memory_reserved does not, NVML does:
    so error vs reserved compares estimate - context, error vs NVML the whole estimate."""
    nvml = m.get("nvml_proc_mib") or m.get("nvml_card_mib")
    source = "process" if m.get("nvml_proc_mib") else "card-baseline" if m.get("nvml_card_mib") else ""
    est = m.get("est_catalog_mib") or m.get("est_hfconfig_mib")
    ctx = m.get("est_catalog_context_mib", m.get("est_hfconfig_context_mib", 0)) or 0
    errors = [m[k] for k in ("error", "est_error", "est_catalog_error", "est_hfconfig_error") if m.get(k)]
    return {
        "case": case.name, "spec": m.get("spec", ""), "targets": case.targets,
        "attention_used": m.get("attention_used", ""), "weight_dtype": m.get("weight_dtype", ""),
        "params": m.get("params", ""),
        "trainable_params": m.get("trainable_params", ""), "reserved_mib": m.get("reserved_mib", ""),
        "allocated_mib": m.get("allocated_mib", ""), "nvml_mib": nvml or "", "nvml_source": source,
        "est_mib": est or "", "est_context_mib": ctx if est else "",
        "err_vs_reserved": _rel(est - ctx if est else None, m.get("reserved_mib")) if not m.get("error") else "",
        "err_vs_nvml": _rel(est, nvml) if not m.get("error") else "",
        "est_hfconfig_mib": m.get("est_hfconfig_mib", ""),
        "err_hfconfig_vs_nvml": _rel(m.get("est_hfconfig_mib"), nvml) if not m.get("error") else "",
        "rss_mib": m.get("rss_mib", ""), "wall_s": m.get("wall_s", ""), "error": " | ".join(errors)[:500],
        "note": "; ".join([case.note, *m.get("notes", [])]).strip("; "),
    }


def _pct(value: Any) -> str:
    return f"{value:+.0%}" if isinstance(value, float) else ""


def write_outputs(rows: list[dict[str, Any]], raw: list[dict[str, Any]], name: str, out_dir: Path,
                  header: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, md_path, json_path = (out_dir / f"{name}.{ext}" for ext in ("csv", "md", "json"))
    with csv_path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    lines = [f"# Measured GPU peaks vs estimate: {name}", "", header, "",
             "Error = estimate / measured - 1 (estimate less its CUDA context vs max_memory_reserved; "
             "whole estimate vs NVML). Estimate by catalog name; hf-config = by the built config.json.", "",
             "| case | spec | reserved MiB | allocated MiB | NVML MiB | estimate MiB | err vs reserved "
             "| err vs NVML | hf-config MiB | wall s | error |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | `{r['spec']}` | {r['reserved_mib']} | {r['allocated_mib']} | "
                     f"{r['nvml_mib']} | {r['est_mib']} | {_pct(r['err_vs_reserved'])} | "
                     f"{_pct(r['err_vs_nvml'])} | {r['est_hfconfig_mib']} | {r['wall_s']} | "
                     f"{str(r['error']).replace('|', '/')[:160]} |")
    md_path.write_text("\n".join(lines) + "\n")
    json_path.write_text(json.dumps({"header": header, "raw": raw}, indent=1, default=str))
    written = [csv_path, md_path, json_path]
    if os.environ.get("OUT"):  # the device tool returns only what lies under $OUT
        for path in written:
            shutil.copy(path, Path(os.environ["OUT"]) / path.name)
    return written


def _gpu_slug(name: str) -> str:
    return "-".join(name.lower().replace("_", " ").split())


def parent_main(args: argparse.Namespace) -> int:
    selected = CASES
    if args.cases:
        wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
        unknown = set(wanted) - {c.name for c in CASES}
        if unknown:
            print(f"unknown cases: {', '.join(sorted(unknown))}; --list shows them", file=sys.stderr)
            return 2
        selected = [c for c in CASES if c.name in wanted]
    if args.list:
        for c in CASES:
            print(f"{c.name:20s} {c.catalog:12s} {' '.join(f'{k}={v}' for k, v in c.spec().items())}"
                  + (f" targets={c.targets}" if c.targets else ""))
        return 0
    by_name = {c.name: c for c in CASES}
    if args.from_json:  # estimates again for measurements taken elsewhere
        saved = json.loads(Path(args.from_json).read_text())
        raw = saved["raw"]
        header, name = saved["header"], Path(args.from_json).stem
        tiny = "tiny" in name
        for m in raw:
            case = by_name[m["case"]].tiny() if tiny else by_name[m["case"]]
            m.update(ask_estimator(case, m, m.get("gpu_type", "h200"), tiny))
        rows = [to_row(by_name[m["case"]].tiny() if tiny else by_name[m["case"]], m) for m in raw]
        for path in write_outputs(rows, raw, name, Path(args.out_dir), header):
            print(f"wrote {path}")
        return 0

    sampler = None
    gpu_name = "cpu"
    if args.device.startswith("cuda"):
        try:
            sampler = NvmlSampler(int(args.device.partition(":")[2] or 0))
            gpu_name = sampler.name
        except Exception as exc:  # no NVML: torch peaks only
            print(f"NVML unavailable ({exc}); torch peaks only", file=sys.stderr)
            gpu_name = "cuda"
    name = _gpu_slug(gpu_name) + ("-tiny" if args.tiny else "")
    gpu_type = "h200" if args.tiny or not sampler else gpu_name
    deadline = time.monotonic() + args.budget
    workdir = Path(tempfile.mkdtemp(prefix="gpu_extras_"))
    raw: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    for case in selected:
        run_case = case.tiny() if args.tiny else case
        left = deadline - time.monotonic()
        if left < 15:  # not enough for even a small case: say so rather than overrun the lease
            m: dict[str, Any] = {"error": f"skipped: time budget ({args.budget:.0f} s) spent"}
        else:
            m = measure(run_case, args, sampler, min(args.timeout, left), workdir)
        m["case"], m["gpu_type"] = case.name, gpu_type
        m.update(ask_estimator(run_case, m, gpu_type, args.tiny))
        row = to_row(run_case, m)
        raw.append(m)
        rows.append(row)
        print(f"{case.name:20s} reserved={row['reserved_mib']!s:>8} alloc={row['allocated_mib']!s:>8} "
              f"nvml={row['nvml_mib']!s:>8} est={row['est_mib']!s:>6} err_res={_pct(row['err_vs_reserved']):>5} "
              f"err_nvml={_pct(row['err_vs_nvml']):>5} hf={row['est_hfconfig_mib']!s:>6} "
              f"{row['wall_s']}s {row['error'][:200]}", flush=True)
    header = (f"Made by `benchmarks/estimate/gpu_extras.py {' '.join(sys.argv[1:])}` on {gpu_name} "
              f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}); {args.steps} step(s) per case; "
              f"torch {next((m['torch'] for m in raw if m.get('torch')), '?')}, transformers "
              f"{next((m['transformers'] for m in raw if m.get('transformers')), '?')}, peft "
              f"{next((m['peft'] for m in raw if m.get('peft')), '?')}.")
    for path in write_outputs(rows, raw, name, Path(args.out_dir), header):
        print(f"wrote {path}")
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    parser.add_argument("--tiny", action="store_true", help="tiny configs of every case (a CPU check)")
    parser.add_argument("--steps", type=int, default=None, help="training steps per case (3; 1 with --tiny)")
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--list", action="store_true", help="print the cases and their specs")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case (default 60)")
    parser.add_argument("--budget", type=float, default=225.0,
                        help="seconds for all cases; later cases are skipped past it (default 225)")
    parser.add_argument("--out-dir", default=str(HERE / "gpu"), help="where the csv/md/json go")
    parser.add_argument("--from-json", default="", help="re-estimate saved measurements (no torch needed)")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--config-dir", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.steps is None:
        args.steps = 1 if args.tiny else 3
    return child_main(args) if args.child else parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
