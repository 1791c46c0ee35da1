#!/usr/bin/env python3
"""Refit the shared physical priors on every public verl log the project reads.

    python scripts/fit_priors.py ../shared            # writes polytrace/data/priors.json
    python scripts/fit_priors.py ../shared --markdown # also prints the tables of docs/step-model.md

reads the corpus under ``<shared>/validation-logs`` (``polytrace/calibrate/folds.py``: ``*.log``,
``ladder/*.log``, ``more/*.log``; what it keeps out and why in ``folds.EXCLUDED``; each read,
configured and priced as ``polytrace validate`` does by ``polytrace/calibrate/corpus.py``, on the
GPU its publisher states in ``polytrace/data/corpus_gpus.json``, else on the GPU the log shows or an
assumed A100 that no step beats, else the slowest preset none does), fits one slowdown per kind of
work and engine setting and constant seconds per kind of stage (``polytrace/calibrate/priors.py``),
scores every log with priors fitted on the others and every
group of logs (one model size, family, GPU type, trainer backend) with priors fitted on the other
groups, beside the naive predictor and the roofline times one scalar (``folds.evaluate``), and
writes the file with its provenance (logs and hashes, commit, date). Deterministic for a given
corpus; about 3 minutes of one CPU core.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from polytrace.calibrate import folds  # noqa: E402
from polytrace.calibrate.corpus import load_corpus  # noqa: E402
from polytrace.calibrate.priors import build_document, markdown_table  # noqa: E402

OUT = ROOT / "polytrace" / "data" / "priors.json"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shared", help="the shared folder (holds validation-logs/)")
    ap.add_argument("-o", "--out", default=str(OUT), help=f"priors file to write (default {OUT.relative_to(ROOT)})")
    ap.add_argument("--markdown", action="store_true", help="print the group-held-out and leave-one-log-out tables")
    args = ap.parse_args(argv)
    folder = Path(args.shared) / "validation-logs"
    corpus = load_corpus(folder, folds.corpus_names(folder))
    doc = build_document(corpus, "shared/validation-logs", groups=folds.evaluate(corpus))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    s = doc["leave_one_out"]["summary"]
    print(f"wrote {out}: {len(corpus)} logs; leave-one-log-out step median error {100 * s['step_median_error']:.1f}% "
          f"(roofline {100 * s['roofline_step_median_error']:.1f}%), gen {100 * s['gen_median_error']:.1f}%, "
          f"worst step ratio {s['worst_step_ratio']:.2f}x")
    for g, r in doc["groups"]["groupings"].items():
        t = r["summary"]
        if t["logs"]:
            print(f"  one {g} held out: step median error {100 * t['step_median_error']:.1f}% (naive "
                  f"{100 * t['naive_step_median_error']:.1f}%, roofline x scalar "
                  f"{100 * t['scalar_step_median_error']:.1f}%), "
                  f"worst {t['worst_step_ratio']:.2f}x, {t['logs_past_2x']} past 2x")
    print(f"  fitted numbers on a bound in {len(doc['groups']['spread']['on_bounds'])} fold(s)")
    if args.markdown:
        print(folds.markdown_table(doc["groups"]))
        print(folds.spread_table(doc["groups"]))
        print(markdown_table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
