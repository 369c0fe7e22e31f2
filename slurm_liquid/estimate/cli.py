"""`slurm-liquid estimate`: what a DL job needs; `estimate train` fits the correction;
`estimate profile` measures peaks with PyTorch (the ground truth for both).

    slurm-liquid estimate --model resnet50 --batch-size 256 --precision amp --json
    slurm-liquid estimate --script job.sbatch --gpu-type a100-40gb
    slurm-liquid estimate train --history history.csv --out correction.json
    slurm-liquid estimate train --from-sacct --since 30d --install /etc/slurm/liquid-correction.json
    slurm-liquid estimate profile --models resnet50,bert-base --batch-sizes 32,64 --out runs.csv
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from slurm_liquid.errors import UsageError
from slurm_liquid.estimate.risk import DEFAULT_RISK
from slurm_liquid.jobspec import (JobSpec, UserFiles, add_arguments as add_spec_arguments, parse_comment,
                                  parse_script)

if TYPE_CHECKING:  # the submit path imports none of the training code
    from slurm_liquid.estimate.catalog import Catalog
    from slurm_liquid.estimate.history import Record
    from slurm_liquid.estimate.learn import Report


def _list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--script", metavar="FILE", help="batch script: #LIQUID lines, #SBATCH, training flags")
    parser.add_argument("--comment", metavar="TEXT", help="a Slurm --comment; `liquid: k=v ...` is read")
    parser.add_argument("--site", metavar="FILE", help="site file (JSON/TOML): extra models, GPU types, "
                        "defaults (or $SLURM_LIQUID_SITE)")
    parser.add_argument("--correction", metavar="FILE", help="fitted correction JSON (or "
                        "$SLURM_LIQUID_CORRECTION; `none` for the prior alone)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--risk", type=float, default=DEFAULT_RISK, metavar="P",
                        help="stated risk that a job exceeds the memory asked for (0.05 = 1 in 20)")
    parser.add_argument("--risk-file", metavar="FILE", help="calibration scores (estimate calibrate; or "
                        "$SLURM_LIQUID_RISK_FILE; default: the shipped published peaks)")
    add_spec_arguments(parser)
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    train = sub.add_parser("train", help="fit the learned correction from history records or "
                           "from what finished jobs used (sacct)")
    train.add_argument("--history", action="append", metavar="FILE",
                       help="CSV/JSONL history (repeatable)")
    train.add_argument("--from-sacct", action="store_true",
                       help="join finished jobs' records (Comment) with the agents' measurements "
                       "(AdminComment), score against the current model, report")
    train.add_argument("--since", default="30d", help="with --from-sacct: jobs since YYYY-MM-DD or N days (30d)")
    train.add_argument("--install", metavar="PATH", help="with --from-sacct: install at PATH if the new "
                       "model is better than the one there (kept as PATH.prev)")
    train.add_argument("--allow-standin", action="store_true",
                       help="with --from-sacct: also learn from stand-in (simulated) readings")
    train.add_argument("--holdout", type=float, default=0.25, help="share of jobs held out to score (0.25)")
    train.add_argument("--seed", type=int, default=0, help="seed of the held-out split and the learner")
    train.add_argument("--out", metavar="FILE", help="where to save it (default correction.json "
                       "with --history alone; with --from-sacct saved whether better or not)")
    train.add_argument("--method", choices=("rf", "gbr"), default="gbr")
    train.add_argument("--quantile", type=float, default=0.9, help="upper quantile to report (0.5-0.99)")
    # also after `train`; SUPPRESS keeps a --json given before `train`
    train.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the report as JSON")
    cal = sub.add_parser("calibrate", help="calibrate the stated risk on measured peaks (history rows: "
                         "the agents' or a profile's) together with the shipped published ones")
    cal.add_argument("--history", action="append", required=True, metavar="FILE", help="CSV/JSONL history (repeatable)")
    cal.add_argument("--out", dest="calibrate_out", required=True, metavar="FILE", help="risk file to write")
    cal.add_argument("--site-only", action="store_true", help="only these rows, not the shipped scores too")
    prof = sub.add_parser("profile", help="train a few steps with PyTorch and record peak memory")
    prof.add_argument("--models", dest="profile_models", required=True, type=_list, metavar="A,B")
    prof.add_argument("--batch-sizes", dest="profile_batches", required=True, type=_list, metavar="N,M")
    prof.add_argument("--precisions", dest="profile_precisions", type=_list, default=["fp32"], metavar="P,Q")
    prof.add_argument("--optimizer", dest="profile_optimizer", default="adamw")
    prof.add_argument("--seq-len", dest="profile_seq", type=int, default=None)
    prof.add_argument("--image-size", dest="profile_image", type=int, default=None)
    prof.add_argument("--device", dest="profile_device", default="cuda", help="cuda, cuda:1 or cpu")
    prof.add_argument("--steps", dest="profile_steps", type=int, default=3)
    prof.add_argument("--out", dest="profile_out", required=True, metavar="CSV", help="rows are appended")


def prepare_argv(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """The arguments with `--key_name` spelt `--key-name` (as in directives), and one clear error for
    an option the parser of that position does not know (argparse would take its value for the
    ACTION: "invalid choice"). Options before an action are the estimate's, after it the action's."""
    actions = _options(parser)
    subs = next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})
    out: list[str] = []
    takes_value = False
    for i, token in enumerate(argv):
        if token == "--":
            return out + argv[i:]
        if not token.startswith("-") and token in subs and not takes_value:
            actions = _options(subs[token])   # the action's own options from here on
        elif token.startswith("--") and len(token) > 2:
            name, sep, value = token.partition("=")
            dashed = "--" + name[2:].replace("_", "-")
            if name not in actions and dashed in actions:
                token, name = dashed + sep + value, dashed
            elif name not in actions and not any(k.startswith(dashed) for k in actions):
                import difflib

                close = difflib.get_close_matches(dashed, sorted(actions), n=2, cutoff=0.6)
                parser.error(f"unknown option {name}" + (f"; did you mean {' or '.join(close)}?" if close
                                                        else "; see --help for the options"))
            action = actions.get(name)
            takes_value = not sep and action is not None and action.nargs not in (0, "?")
            out.append(token)
            continue
        takes_value = False
        out.append(token)
    return out


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: action for action in parser._actions for s in action.option_strings if s.startswith("--")}


def _read(path: str, what: str) -> str:
    """A file's text. Bytes that are not UTF-8 (a Latin-1 comment, which sbatch accepts) read as
    U+FFFD: the directives and flags around them are ASCII and still read."""
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot read it: {exc.strerror or exc}") from None


def _explicit(spec: JobSpec) -> dict[str, object]:
    inferred = ("training command", "#SBATCH --gres", "#SBATCH --gpus")
    return {k: v for k, v in spec.to_dict().items()
            if not any(tag in spec.sources.get(k, "") for tag in inferred)}


def job_spec(args: argparse.Namespace) -> JobSpec:
    """Flags > (#LIQUID lines and `liquid:` comment, which must agree) > inferred values."""
    layers = []
    if args.comment:
        layers.append(parse_comment(args.comment))
    if args.script:
        # this process runs as the user: it may read the launch configs the script names
        import os

        files = UserFiles([os.path.dirname(os.path.abspath(args.script)), os.getcwd()])
        layers.append(parse_script(_read(args.script, "script"), read=files))
    if len(layers) == 2:
        a, b = (_explicit(s) for s in layers)
        for key in sorted(a.keys() & b.keys()):
            if a[key] != b[key]:
                raise UsageError(f"conflicting directives for {key}: {a[key]!r} (--comment) "
                                 f"and {b[key]!r} ({layers[1].sources[key]} of the script)")
    return JobSpec.from_args(args).merged(*layers)


def _run_estimate(args: argparse.Namespace) -> int:
    from slurm_liquid.estimate.api import estimate

    spec = job_spec(args)
    if not 0 < args.risk < 1:
        raise UsageError(f"risk: {args.risk} is outside (0, 1) (0.05 = 1 job in 20)")
    result = estimate(spec, site=args.site, correction=args.correction, risk=args.risk, risk_file=args.risk_file)
    if args.json:
        print(json.dumps(result.to_json(), sort_keys=False))
    else:
        print(_text(result.to_json()))
    return 0 if result.decision.fits else 1


def _text(out: dict) -> str:
    b = out["breakdown_mib"]
    lines = [out["explanation"].split("; fits with:")[0], "",
             f"per-GPU memory (MiB), micro-batch {out['micro_batch']}, sharding {out['sharding']}:"]
    lines += [f"  {name:12s} {b[name]:>9,}" for name in b]
    lines += [f"  {'total':12s} {out['gpu_mem_mib']:>9,}   (prior {out['prior_mib']:,} x correction "
              f"{out['correction_factor']} [{out['correction']}] x risk margin {out['risk_factor']})",
              f"point:    {out['point_mib']:,} MiB per GPU; bound {out['bound_mib']:,} MiB at risk "
              + (f"1 in {round(1 / out['risk'])} of exceeding it ({out['risk_models']} calibration models"
                 + ("" if out["risk_guaranteed"] else ", too few for this risk: not guaranteed") + ")"
                 if out["risk"] else "not stated"), "",
              f"request:  --gres={out['gres']} --nodes={out['nodes']}  "
              f"({out['gpus']} GPU(s) of {out['gpu_type']}, {out['gpu_mem_total_mib']:,} MiB each)",
              f"cpus/gpu: {out['cpus_per_gpu']}   host memory/gpu: {out['host_mem_mib_per_gpu']:,} MiB",
              f"scaling:  efficiency {out['scaling_efficiency']:.2f} at {out['gpus']} GPU(s); "
              f"widest efficient width {out['max_efficient_gpus']}"]
    if out["asked_gpus"]:
        lines.append(f"asked:    {out['asked_gpus']} GPU(s)")
    if out["kv_cache_mib"]:
        lines.append(f"kv cache: {out['kv_cache_mib']:,} MiB per GPU (part of activations)")
    if out["advice"]:
        lines.append("does not fit as written; each of these fits (cheapest first):")
        lines += [f"  - {o['change']} ({o['why']}): {o['need_mib']:,} MiB per GPU on {o['gpus']} x "
                  f"{o['gpu_type']}" for o in out["advice"]]
    lines += [f"note:     {note}" for note in out["notes"]]
    lines += ["", "read (value, source):"]
    lines += [f"  {key:22s} {str(v['value']).lower() if isinstance(v['value'], bool) else v['value']!s:24s} "
              f"{v['source']}" + (f": {v['where'].removeprefix(v['source']).strip()}"
                                  if v["where"] not in ("default", v["source"], "command-line flag") else "")
              for key, v in out["inputs"].items()]
    return "\n".join(lines)


def since_date(text: str, now: datetime | None = None) -> datetime:
    """`2026-11-01` or `30d` (days before now)."""
    text = text.strip()
    if text[:-1].isdigit() and text[-1:].lower() == "d":
        return (now or datetime.now()) - timedelta(days=int(text[:-1]))
    try:
        return datetime.strptime(text, "%Y-%m-%d")
    except ValueError:
        raise UsageError(f"since: {text!r} is neither YYYY-MM-DD nor a number of days like 30d") from None


def _run_train(args: argparse.Namespace) -> int:
    import os
    from dataclasses import replace
    from pathlib import Path

    from slurm_liquid.estimate import learn
    from slurm_liquid.estimate.api import SITE_ENV
    from slurm_liquid.estimate.catalog import load_catalog
    from slurm_liquid.estimate.gpus import load_gpu_table
    from slurm_liquid.estimate.history import read_history

    if not (args.history or args.from_sacct):
        raise UsageError("train: give --history FILE (measured rows) or --from-sacct (finished jobs)")
    if not 0.5 <= args.quantile < 1.0:
        raise UsageError(f"quantile: {args.quantile} is outside 0.5..0.99")
    site = args.site or os.environ.get(SITE_ENV) or None
    catalog, context = load_catalog(site), load_gpu_table(site).context_mib
    records = [r for path in args.history or () for r in read_history(path, catalog, context)]
    if args.from_sacct:
        return _train_from_sacct(args, catalog, records, context)
    if args.install:
        raise UsageError("install: only with --from-sacct (it installs only a model that scores better)")
    out = args.out or "correction.json"
    model = learn.fit_records(records, args.method, args.quantile, args.seed,
                              meta={"history": [str(p) for p in args.history]})
    model = replace(model, sharing=learn.sharing_table(records))  # from a `util` column, if any
    model.save(Path(out))
    print(f"trained {args.method} on {len(records)} rows -> {out}", file=sys.stderr)
    return 0


def _train_from_sacct(args: argparse.Namespace, catalog: Catalog, extra_rows: list[Record],
                      context_mib: float) -> int:
    from pathlib import Path

    from slurm_liquid.estimate import learn
    from slurm_liquid.estimate.correction import load
    from slurm_liquid.slurm import connect

    since = since_date(args.since)
    jobs = connect().accounting(since=since)
    records, skipped = learn.history_from_jobs(jobs, catalog, args.allow_standin, context_mib)
    current, current_note = None, ""
    if args.install and Path(args.install).exists():
        try:
            current = load(args.install)
        except UsageError as exc:  # e.g. from an older slurm-liquid: score against the prior instead
            current_note = f"current model unreadable, compared with the prior alone: {exc}"
    try:
        report = learn.retrain(records + extra_rows, current, args.holdout, args.seed, args.method,
                               args.quantile, meta={"source": f"sacct since {since:%Y-%m-%d}",
                                                    "history": [str(p) for p in args.history or ()]})
    except UsageError as exc:
        raise UsageError(f"sacct since {since:%Y-%m-%d}: {exc} ({len(jobs)} jobs; skipped: "
                         f"{_counts(skipped) or 'none'})") from None
    outcome: dict[str, object] = {"installed": False, "path": args.install, "backup": None}
    if args.out:
        report.model.save(Path(args.out))
    if args.install and report.better:
        backup = learn.install(report.model, args.install)
        outcome.update(installed=True, backup=str(backup) if backup else None)
    if getattr(args, "json", False):
        print(json.dumps({**report.to_json(), "jobs": len(jobs), "skipped": skipped, **outcome,
                          "note": current_note or None}))
        return 0
    print(_report_text(report, len(jobs), skipped))
    if current_note:
        print(current_note)
    if args.install:
        if outcome["installed"]:
            kept = f" (previous kept as {outcome['backup']})" if outcome["backup"] else ""
            print(f"installed the new model at {args.install}{kept}: {report.verdict}")
        else:
            print(f"kept the current model{'' if current else ' (the prior alone)'}: {report.verdict}")
    return 0


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def _report_text(report: Report, jobs: int, skipped: dict[str, int]) -> str:
    rows = [("prior alone", report.prior), ("current model", report.current), ("new model", report.new)]
    lines = [f"{jobs} jobs from sacct, {report.rows} usable: trained on {report.train_rows}, "
             f"scored on {report.new.rows} held out",
             f"  {'':16s} {'mean rel. error':>15s} {'under-estimates':>16s}"]
    lines += [f"  {name:16s} {s.mre:>15.1%} {s.under:>16.0%}" for name, s in rows if s is not None]
    lines.append(f"skipped: {_counts(skipped) or 'none'}")
    return "\n".join(lines)


def _run_profile(args: argparse.Namespace) -> int:
    from slurm_liquid.estimate.catalog import load_catalog
    from pathlib import Path

    from slurm_liquid.estimate.profile import run_grid

    catalog = load_catalog(args.site)
    entries = [catalog.lookup(name) for name in args.profile_models]
    try:
        batches = [int(b) for b in args.profile_batches]
    except ValueError:
        raise UsageError("batch-sizes: whole numbers separated by commas") from None
    run_grid(entries, batches, args.profile_precisions, args.profile_optimizer, args.profile_device,
             args.profile_steps, Path(args.profile_out), args.profile_seq, args.profile_image)
    return 0


def _run_calibrate(args: argparse.Namespace) -> int:
    """Scores of the site's measured rows under the site's estimator (prior x its correction)."""
    import math
    import os
    from pathlib import Path

    from slurm_liquid.estimate import risk
    from slurm_liquid.estimate.api import SITE_ENV, _load_correction, correction_path
    from slurm_liquid.estimate.catalog import load_catalog
    from slurm_liquid.estimate.gpus import load_gpu_table
    from slurm_liquid.estimate.history import read_history
    from slurm_liquid.estimate.prior import MIB

    site = args.site or os.environ.get(SITE_ENV) or None
    catalog, context = load_catalog(site), load_gpu_table(site).context_mib
    path = correction_path(args.correction)
    fitted = _load_correction(path) if path else None
    pairs = []
    for record in (r for p in args.history for r in read_history(p, catalog, context)):
        point = record.prior.scaled(fitted.factor(record.entry, record.spec, record.prior)) if fitted else record.prior
        fixed = point.context if record.measure == "nvml" else 0.0
        pairs.append((record.entry.name, max(record.measured_mib * MIB - fixed, 1.0),
                      point.for_measure(record.measure) - fixed))
    scores = risk.scores_from(pairs)     # one per model: its worst row
    if not args.site_only:
        scores = tuple(sorted(scores + risk.load(risk.SHIPPED).scores))
    model = risk.RiskModel(scores, f"{len(pairs)} site rows ({', '.join(args.history)})"
                           + ("" if args.site_only else " + the shipped published peaks"))
    risk.save(model, Path(args.calibrate_out), meta={"correction": path, "site_rows": len(pairs)})
    margin = model.margin(args.risk)
    print(f"calibrated on {len(scores)} models -> {args.calibrate_out}: at risk {args.risk:g} the bound is the point "
          f"estimate x {margin.factor:.3f}" + ("" if margin.guaranteed else
                                              f" (too few models for that risk: need {math.ceil(1 / args.risk) - 1})"),
          file=sys.stderr)
    return 0


def run(args: argparse.Namespace) -> int:
    action = getattr(args, "action", None)
    if action == "train":
        return _run_train(args)
    if action == "profile":
        return _run_profile(args)
    if action == "calibrate":
        return _run_calibrate(args)
    return _run_estimate(args)
