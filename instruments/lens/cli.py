"""``mirrorscan lens predict`` and ``mirrorscan lens headline``: lens's own tools.

* ``predict`` projects new texts onto an invocation's wrapper directions. An entry point, like ``jobs/``: it
  reads the files analyze wrote and runs the model through the engine registry (``actors.registry``), which
  the rest of the instrument never touches. The numbers come from ``instruments.lens.predict``.
* ``headline`` computes the headline, its spread over wrappers and the scoring-label null's floor again from
  the rows a report's query selects, with the seed (``instruments.lens.recompute``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.reader import Reader

EPILOG = """\
ANALYSIS is the folder `mirrorscan analyze` wrote for a lens invocation (it holds predict-<label>-<variant>.json
and directions.parquet), or a folder above it: an experiment's or an invocation's folder in the store, whose
newest lens analysis is then read (its path is printed first). TEXTS is a .txt file (one text per line), a .jsonl file ({"id", "text"} per line) or a
.csv file with id and text columns. Each text is extracted exactly as the invocation extracted its items (the
variant's newline convention, rendering with its system turn, suffix, prefix and frozen date, truncation,
pooling and dropping), by the invocation's model unless --model names another copy of it.

Per text: score = projection on the mean of the wrappers' unit directions at the basis's layer; sd = the
spread of its projections over the wrappers (the uncertainty); nearest = the scoring class whose mean
projection is nearer. Units: activation units along the direction.

example (in the repository, after `mirrorscan scan experiments/lens-demo` and `mirrorscan analyze
experiments/lens-demo`; the packaged task texts stand for your own):
  mirrorscan lens predict .mirrorscan/store/lens-demo --label smollm2 --texts instruments/lens/data/tasks.jsonl
"""


def read_texts(path: str) -> list[tuple[str, str]]:
    """(id, text) pairs of a .txt, .jsonl or .csv file."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(path, "--texts", "does not exist", "give a .txt, .jsonl or .csv file")
    if file.suffix.lower() in (".jsonl", ".csv"):
        from mirrorscan.instruments.lens.items import load_items

        return [(i.id, i.text) for i in load_items(str(file.resolve()), "--texts", False).items]
    try:
        lines = [line for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
    except UnicodeDecodeError as exc:
        raise ConfigError(path, "--texts", f"is not UTF-8 ({exc.reason} at byte {exc.start})", "save it as UTF-8") from None
    if not lines:
        raise ConfigError(path, "--texts", "holds no text", "write one text per line")
    return [(str(n), line) for n, line in enumerate(lines, 1)]


def analysis_folder(folder: str) -> Path:
    """The lens analysis folder ``folder`` names: itself when it holds ``predict-*.json``, else the newest lens
    analysis below it (``<invocation>/analysis/lens/<stamp>/``: the latest stamp, across invocations)."""
    root = Path(folder)
    if not root.is_dir():
        raise ConfigError(folder, "ANALYSIS", "is not a folder", "give a lens analysis folder, or an experiment's "
                          "or invocation's folder in the store")
    if any(root.glob("predict-*.json")):
        return root
    found = sorted({p.parent for p in root.glob("**/analysis/lens/*/predict-*.json")}, key=lambda p: p.name)
    if not found:
        raise ConfigError(folder, "ANALYSIS", "holds no lens analysis (no predict-*.json in it or below it)",
                          "run `mirrorscan analyze` on the lens invocation first, then give its folder")
    print(f"analysis: {found[-1]}", file=sys.stderr)
    return found[-1]


def load_basis(folder: str, label: str | None, variant: str):
    """(document, unit directions (wrappers, hidden)) of one model and variant from an analysis folder."""
    import numpy as np
    import pyarrow.parquet as pq

    root = analysis_folder(folder)
    docs = sorted(root.glob("predict-*.json"))
    chosen = [json.loads(d.read_text()) for d in docs]
    chosen = [d for d in chosen if d["variant"] == variant and (label is None or d["label"] == label)]
    if len(chosen) != 1:
        names = ", ".join(d.stem.removeprefix("predict-") for d in docs)
        raise ConfigError(folder, "--label", f"{len(chosen)} bases match (label {label!r}, variant {variant!r})",
                          f"name one with --label/--variant; the folder holds: {names}")
    doc = chosen[0]
    table = pq.read_table(root / "directions.parquet").to_pylist()
    rows = {r["wrapper"]: r["direction"] for r in table if r["label"] == doc["label"] and r["variant"] == variant}
    return doc, np.array([rows[w] for w in doc["wrappers"]], dtype=np.float64)


def extract(doc: dict, model: str, texts: list[str], reader: Reader):
    """(texts, hidden) pooled vectors at the basis's layer, extracted as the invocation extracted its items: the
    variant's newline convention applied to each text, then its rendering (system turn, suffix, prefix, frozen
    date), truncation, dropping and pooling."""
    import numpy as np
    import pyarrow as pa

    from mirrorscan.grid.records import ModelVariant, InvocationContext
    from mirrorscan.instruments.lens.extraction import RENDERING_OPTIONS
    from mirrorscan.instruments.lens.items import apply_newline

    options = doc["extraction"]
    engine = reader.engine("hf", "activations")(ModelVariant(label=doc["label"], model=model, dtype=doc["dtype"] or "float32"),
                                               model, InvocationContext("predict", "predict", "lens"))
    cells = pa.Table.from_pylist([{"probe_id": f"predict|{n}", "sample": 0, "seed": 0,
                                   "text": apply_newline(t, options.get("newline", "lf")),
                                   "rendering": options["rendering"], "pooling": options["pooling"],
                                   "drop_bos": options["drop_bos"], "drop_whitespace": options["drop_whitespace"],
                                   "max_input_tokens": options["max_input_tokens"], "vector_dtype": "float32",
                                   **{k: options.get(k) for k in RENDERING_OPTIONS}}
                                  for n, t in enumerate(texts)])
    rows = engine(cells)
    errors = [e for e in rows.column("error").to_pylist() if e]
    if errors:
        raise ConfigError("", "--texts", f"{len(errors)} text(s) could not be extracted: {errors[0]}", "fix or drop them")
    return np.array([v[doc["layer"]] for v in rows.column("layer_vectors").to_pylist()], dtype=np.float64)


HEADLINE_EPILOG = """\
INPUT is the output of the report's query for these numbers (the rows of every successful cell with its
per-layer vectors), written by `mirrorscan sql --format csv "<query>" > vectors.csv`; a Parquet file of the same
columns also works. The other options are the invocation's settings (`mirrorscan sql "SELECT settings FROM
scan_invocations WHERE invocation_id = '<id>'"`, under instrument_settings); the report prints the whole
command line with them.

Prints JSON: per label/variant, median_max_auroc_minus_half and sd_over_wrappers (max over layers of
AUROC − 0.5 per wrapper: its median and sd, n − 1), label_floor_median (the median over wrappers of the
scoring-label null's mean, same unit), and each wrapper's values. With the invocation's seed these are the
analysis's numbers exactly.

example:
  mirrorscan sql --format csv "SELECT … FROM traces_lens WHERE invocation_id = '<id>' …" > vectors.csv
  mirrorscan lens headline --input vectors.csv --positive deployment --evaluation e1,e2 --deployment d1,d2 \\
      --layers blocks --permutations 1000 --seed 0
"""


def headline_main(args) -> int:
    """``mirrorscan lens headline``: print the recomputed numbers as JSON; 2 for bad input."""
    from mirrorscan.instruments.lens.recompute import headline, layer_sets, read_rows

    try:
        split = {name: [f for f in getattr(args, name).split(",") if f] for name in ("evaluation", "deployment")}
        for name, framings in split.items():
            if not framings:
                raise ConfigError("", f"--{name}", "names no framing", "give the framing ids, comma-separated")
        numbers = headline(read_rows(args.input), positive=args.positive, evaluation=split["evaluation"],
                           deployment=split["deployment"], layers=layer_sets(args.layers),
                           permutations=args.permutations, seed=args.seed)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(numbers, indent=2))
    return 0


def build_parser(prog: str = "mirrorscan lens") -> argparse.ArgumentParser:
    """The ``mirrorscan lens`` parser: ``predict`` and ``headline``."""
    parser = argparse.ArgumentParser(prog=prog, description="Tools for lens results.")
    sub = parser.add_subparsers(dest="command", required=True)
    pr = sub.add_parser("predict", help="project new texts on an invocation's wrapper directions, with their spread",
                        description="Project new texts on the mean direction of an invocation's wrappers; the sd "
                        "over wrappers is each prediction's uncertainty.", epilog=EPILOG,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    pr.add_argument("analysis", metavar="ANALYSIS", help="the invocation's analysis folder")
    pr.add_argument("--texts", required=True, metavar="FILE", help="the texts to score (.txt, .jsonl or .csv)")
    pr.add_argument("--label", help="the model label (needed when the invocation ran several models)")
    pr.add_argument("--variant", default="base", help="the implementation variant (default: %(default)s)")
    pr.add_argument("--model", help="the model's folder, when not where the invocation loaded it from")
    pr.add_argument("--json", action="store_true", help="print JSON instead of a table")
    hd = sub.add_parser("headline", help="the headline, its spread and the null's floor again from stored rows",
                        description="Compute lens's headline numbers again from the rows the report's query "
                        "selects, as the analysis computes them.", epilog=HEADLINE_EPILOG,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    hd.add_argument("--input", required=True, metavar="FILE", help="the query's rows (.csv or .parquet)")
    hd.add_argument("--positive", required=True, metavar="CLASS", help="the scoring class counted as positive")
    hd.add_argument("--evaluation", required=True, metavar="IDS", help="the evaluation framings, comma-separated")
    hd.add_argument("--deployment", required=True, metavar="IDS", help="the deployment framings, comma-separated")
    hd.add_argument("--layers", default="blocks", metavar="SET",
                    help="layers in the max: blocks (1…L), all (0…L) or manek (1…L−1), or per variant (base=blocks,chat=all); default %(default)s")
    hd.add_argument("--permutations", type=int, default=0, metavar="N",
                    help="scoring-label permutations per wrapper (0: no floor; default %(default)s)")
    hd.add_argument("--seed", type=int, default=0, metavar="S", help="the root seed (default %(default)s)")
    return parser


def main(argv: list[str], prog: str, reader: Reader) -> int:
    """Parse ``argv`` and run the subcommand; exit code 0, or 2 for bad input (one line on stderr). ``reader``
    gives ``predict`` its engine (``grid.reader.Reader.engine``)."""
    args = build_parser(prog).parse_args(argv)
    if args.command == "headline":
        return headline_main(args)
    from mirrorscan.instruments.lens.predict import predict

    try:
        doc, units = load_basis(args.analysis, args.label, args.variant)
        texts = read_texts(args.texts)
        model = args.model or doc["model"]
        if not model or not Path(model).exists():
            raise ConfigError(args.analysis, "--model", f"the invocation's model {model!r} is not on this machine",
                              "give its folder with --model")
        results = predict(extract(doc, model, [t for _, t in texts], reader), units, doc["classes"])
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = [{"id": i, **r} for (i, _), r in zip(texts, results)]
    if args.json:
        print(json.dumps({"layer": doc["layer"], "wrappers": len(doc["wrappers"]), "classes": doc["classes"],
                          "positive_class": doc["positive_class"], "predictions": out}, indent=2))
        return 0
    print(f"layer {doc['layer']}, {len(doc['wrappers'])} wrappers; scoring classes on the mean direction: "
          + ", ".join(f"{c} {v['mean']:+.3f} (sd {v['sd']:.3f})" for c, v in doc["classes"].items()))
    print(f"{'id':<12} {'score':>9} {'sd':>8} {'nearest':<12}")
    for r in out:
        print(f"{r['id']:<12} {r['score']:>+9.3f} {r['sd_over_wrappers']:>8.3f} {r['nearest_class']:<12}")
    return 0
