"""The open_scan instrument as the grid engine sees it: one fixed probe set replayed verbatim to every model,
sampled answers, and two self-reports.

The config section and its frozen form are ``spec`` (``OpenScanSpec``).

Cells, for every model label and probe (item_key ``query_id@hash8``):

* ``answer`` — ``samples`` cells (sample 0…n−1), sampled at the section's ``sampling``, each with its own seed
  from (root seed, probe_id, sample);
* ``cold`` — one cell (sample 0): the model rates the query with no answer in context, greedy;
* ``posthoc`` — a second stage (item_key ``query_id@hash8~posthoc``), one cell per stored answer, built from
  it: the model rates its own answer, greedy.

The envelope coordinate says which (``answer``, ``cold``, ``posthoc``). Every cell carries its own sampling
(``temperature``, ``top_p``, ``max_tokens`` request columns), so the model's own sampling settings are not used,
and its probe's text (``query``, stored on its rows), so a cell renders from its own coordinates: a reproduction
runs the stored cells when the probe file has changed or is gone, post-hoc stage included.
A self-report's rating is read in the actor (``templates.parse_rating``): the first integer of the reply inside
the template's scale, else null — never 0.

Appending: a new scan of the experiment runs only the cells that no earlier invocation holds in the same
*series* — the same model source for the label (checked by the grid engine) and the same ``series`` (a hash of
everything else that shapes an answer: templates, locale, sampling, self-report length, the HF sampler
version). A probe whose text changed under its id gets a new item_key; the scan refuses it unless
``--accept-changed-probes`` is given (``check_append``).
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.grid.instrument import Analysis, Instrument, SpecContext, Stage
from mirrorscan.grid.matrix import CellValue
from mirrorscan.grid.reader import Reader
from mirrorscan.grid.settings import Settings
from mirrorscan.grid.trace_schema import doc_field
from mirrorscan.instruments.open_scan.spec import IMPORTED_PREFIX, OpenScanSpec, load_section
from mirrorscan.instruments.open_scan.templates import load_templates, parse_rating

ANSWER, COLD, POSTHOC = "answer", "cold", "posthoc"
"""The three kinds of cell, stored in the envelope coordinate."""
COORDINATES = (
    doc_field("query_id", pa.string(), "the probe's stable id in its CSV (open_scan)"),
    doc_field("query_hash", pa.string(), "SHA-256 (hex) of the probe's query, its UTF-8 bytes as read (open_scan)"),
    doc_field("query", pa.string(), "the probe's query verbatim, as read from its CSV (open_scan; null in rows "
              "stored before it was recorded, and in imported rows)"),
    doc_field("locale", pa.string(), "locale written into the user template, e.g. en-AU (open_scan)"),
    doc_field("series", pa.string(), "hash (12 hex) of what shapes an answer besides the model: templates, locale, "
              "sampling, self-report length, HF sampler version; cells are held across invocations within a series "
              "(open_scan)"),
)
RATING = doc_field("rating", pa.int32(), "self-report rows: the first integer of the reply inside the template's "
                   "scale; null when there is none (not measured, never 0); null for answers (open_scan)")
IMPORT_EXTRA = doc_field("import_extra", pa.string(), "imported rows: JSON of the imported line's keys that have no "
                         "column of their own, verbatim; null for scanned rows and lines without such keys (open_scan)")
COLUMNS = COORDINATES + (RATING, IMPORT_EXTRA)


NOT_MEASURED = "not measured"
"""How a self-report whose reply held no rating on the scale is shown (never as a number)."""


def self_report_values(rows: pa.Table) -> pa.Array:
    """One text per stored row, for the browser's matrix: ``cold 7`` / ``posthoc 8`` for a self-report with its
    rating (points on the template's scale), ``cold not measured`` where the reply held none, null for answers
    and failed rows. Cold and post-hoc stay apart and a missing rating is never shown as a number."""
    out: list[str | None] = []
    for envelope, rating, error in zip(rows.column("envelope").to_pylist(), rows.column("rating").to_pylist(),
                                       rows.column("error").to_pylist()):
        if envelope not in (COLD, POSTHOC) or error is not None:
            out.append(None)
        else:
            out.append(f"{envelope} {NOT_MEASURED if rating is None else rating}")
    return pa.array(out, pa.string())


class OpenScan(Instrument[OpenScanSpec]):
    """The open_scan instrument (module docstring)."""

    name = "open_scan"
    engine_kind = "generate"
    columns = COLUMNS
    coordinates = tuple(f.name for f in COORDINATES)
    legacy_keys = ()
    sources = "mirrorscan.instruments.open_scan.sources"
    """Its headline numbers' definitions and queries, and the scan summary's query (``sources``)."""
    cell_value = CellValue("self_report", "class", reads=("envelope", "rating", "error"), derive=self_report_values,
                           doc="each self-report apart, never averaged together: cold (the question, before any "
                           "answer) and post-hoc (the model's own answer), with the rating read from the reply, or "
                           "'not measured' where it held none; answers themselves are counted as rows")
    """A cell's value, for the browser (``self_report_values``)."""
    sampled = True
    """Answers are sampled whatever the model's temperature: the HF sampler's version shapes them."""
    appends = True
    """An experiment is one matrix across invocations: a new invocation asks only the cells of its series that
    no earlier one holds (``held_cells``)."""

    def __init__(self):
        self.stages = (Stage(POSTHOC, self.posthoc_cells, reads=("response",)),)

    # ---- config ---------------------------------------------------------------------------------------

    def load_spec(self, section: dict, ctx: SpecContext) -> OpenScanSpec:
        """Validate the section: the probe CSV (read verbatim), the templates, locale, sampling
        (``spec.load_section``)."""
        return load_section(section, ctx)

    def content_hashes(self, spec: OpenScanSpec) -> dict:
        """SHA-256 of the probe file and of each template file (catalog ``content_hashes``)."""
        scan = spec.scan
        return {"probes": scan.probe_set.sha256, **{f"template_{k}": sha for k, sha in scan.templates.hashes}}

    def envelope_version(self, spec: OpenScanSpec) -> str:
        """The template set's version (stored on every row as ``envelope_version``)."""
        return spec.scan.templates.version

    def n_items(self, spec: OpenScanSpec) -> int:
        """Answer cells per model and sample: the probes (cold and post-hoc cells come on top)."""
        return spec.scan.probe_set.n

    # ---- the grid ---------------------------------------------------------------------------------------

    def cells(self, spec: OpenScanSpec, labels: list[str], samples: int) -> pa.Table:
        """Per label: every probe's ``samples`` answer cells, then every probe's cold cell (sample 0). Cells of
        one kind sit together so that an engine batch holds one ``max_tokens`` (the HF engine generates each
        value's cells in their own call). Each carries its probe's query, read from the probe file (refused
        when it changed since the section was frozen)."""
        queries = {p.query_hash: p.query for p in spec.probes()}
        rows: dict[str, list] = {k: [] for k in ("label", "item_key", "envelope", "sample", "query_id", "query_hash")}
        items = spec.scan.probe_set.items
        for label in labels:
            kinds = [*((q, h, ANSWER, s) for q, h in items for s in range(samples)), *((q, h, COLD, 0) for q, h in items)]
            for query_id, query_hash, envelope, sample in kinds:
                rows["label"].append(label)
                rows["item_key"].append(f"{query_id}@{query_hash[:8]}")
                rows["envelope"].append(envelope)
                rows["sample"].append(sample)
                rows["query_id"].append(query_id)
                rows["query_hash"].append(query_hash)
        n = len(rows["label"])
        return pa.table({"label": pa.array(rows["label"], pa.string()), "item_key": pa.array(rows["item_key"], pa.string()),
                         "envelope": pa.array(rows["envelope"], pa.string()), "ordering": pa.array(["-"] * n, pa.string()),
                         "sample": pa.array(rows["sample"], pa.int32()), "query_id": pa.array(rows["query_id"], pa.string()),
                         "query_hash": pa.array(rows["query_hash"], pa.string()),
                         "query": pa.array([queries[h] for h in rows["query_hash"]], pa.string()),
                         "locale": pa.array([spec.locale] * n, pa.string()), "series": pa.array([spec.series] * n, pa.string())})

    def posthoc_cells(self, spec: OpenScanSpec, previous: pa.Table) -> pa.Table:
        """One post-hoc cell per stored answer (same label, probe and sample), carrying the answer to rate."""
        answers = previous.filter(pc.equal(previous.column("envelope"), ANSWER))
        keep = ["label", "item_key", "ordering", "sample", *self.coordinates]
        return (answers.select(keep).append_column("envelope", pa.array([POSTHOC] * answers.num_rows, pa.string()))
                .append_column("answer", answers.column("response")))

    def render(self, block: pa.Table, spec: OpenScanSpec) -> pa.Table:
        """System and user text of each cell, and its own sampling: answers at the section's sampling, the
        self-reports greedy with ``report_max_tokens``. The query is the cell's own; a cell without one
        (stored before it was recorded) is looked up in the probe file, which must not have changed."""
        scan = spec.scan
        templates, sampling = scan.templates, scan.sampling
        envelopes = block.column("envelope").to_pylist()
        answers = block.column("answer").to_pylist() if "answer" in block.column_names else [None] * block.num_rows
        own = block.column("query").to_pylist() if "query" in block.column_names else [None] * block.num_rows
        queries = {p.query_hash: p.query for p in spec.probes()} if None in own else {}
        users, temperature, top_p, max_tokens = [], [], [], []
        for envelope, query_hash, answer, query in zip(envelopes, block.column("query_hash").to_pylist(), answers, own):
            query = queries[query_hash] if query is None else query
            if envelope == ANSWER:
                users.append(templates.render_user(scan.locale, query))
                temperature.append(sampling.temperature)
                top_p.append(sampling.top_p)
                max_tokens.append(sampling.max_tokens)
                continue
            report = templates.cold if envelope == COLD else templates.posthoc
            users.append(report.render(query, answer=answer, locale=scan.locale))
            temperature.append(0.0)
            top_p.append(1.0)
            max_tokens.append(scan.report_max_tokens)
        return (block.append_column("system_text", pa.array([templates.system_prompt] * block.num_rows, pa.string()))
                .append_column("user_text", pa.array(users, pa.string()))
                .append_column("temperature", pa.array(temperature, pa.float64()))
                .append_column("top_p", pa.array(top_p, pa.float64()))
                .append_column("max_tokens", pa.array(max_tokens, pa.int64())))

    def annotate(self, rows: pa.Table, spec: OpenScanSpec) -> pa.Table:
        """The rating of each self-report row (``templates.parse_rating``; null for answers and errors)."""
        if spec.templates is not None:
            templates = spec.templates
            scales = {COLD: (templates.cold.low, templates.cold.high),
                      POSTHOC: (templates.posthoc.low, templates.posthoc.high)}
        else:   # an imported file's rows: the scales the import rated them on (else the packaged ones)
            given = spec.imported.scales if spec.imported is not None else None
            packaged = load_templates("packaged:v1")
            scales = {COLD: given["cold"] if given else (packaged.cold.low, packaged.cold.high),
                      POSTHOC: given["posthoc"] if given else (packaged.posthoc.low, packaged.posthoc.high)}
        ratings = []
        for envelope, text in zip(rows.column("envelope").to_pylist(), rows.column("response").to_pylist()):
            report = scales.get(envelope)
            ratings.append(None if report is None else parse_rating(text, *report))
        index = rows.schema.get_field_index("rating")
        column = pa.array(ratings, pa.int32())
        return rows.set_column(index, "rating", column) if index >= 0 else rows.append_column("rating", column)

    # ---- appending ----------------------------------------------------------------------------------------

    def held_cells(self, spec: OpenScanSpec, earlier: pa.Table) -> pa.Table:
        """Cells that earlier invocations hold in this series (their rows: same model source, checked by the grid
        engine): never asked again in this experiment."""
        same = earlier.filter(pc.equal(earlier.column("series"), spec.series))
        return same.select(["probe_id", "sample"])

    def scanned_rows(self, earlier: pa.Table) -> pa.Table:
        """The earlier rows a scan made: an imported file's rows (series ``imported:…``) name their models as the
        file did, hold no scan's cells and never change which model a label names or which text a probe has."""
        if earlier.num_rows == 0:
            return earlier
        imported = pc.fill_null(pc.starts_with(earlier.column("series"), IMPORTED_PREFIX), False)
        return earlier.filter(pc.invert(imported))

    def check_append(self, spec: OpenScanSpec, earlier: pa.Table, accept_changed: bool,
                     scans: list | None = None) -> list[str]:
        """Before a new invocation: refuse probes whose text differs from the one the newest earlier scan used
        (an edit, or a revert to an earlier text: ``history``) unless ``accept_changed``, and say in one line when
        the settings start a new series. Returns the lines to print (recorded with the invocation). ``scans``: the
        earlier scan invocations as (invocation id, start, frozen instrument settings), oldest first; None reads
        their probe sets from ``earlier``."""
        from mirrorscan.instruments.open_scan.history import change_notes, changes, uses_of_rows, uses_of_scans

        earlier = self.scanned_rows(earlier)
        uses = uses_of_scans(scans) if scans is not None else uses_of_rows(earlier)
        if not uses and earlier.num_rows == 0:
            return []
        probe_set = spec.scan.probe_set
        notes = change_notes(changes(uses, probe_set.items), accept_changed, probe_set.path)
        series = set(earlier.column("series").to_pylist()) if earlier.num_rows else set()
        if series and spec.series not in series:
            notes.append(f"open_scan: a new series {spec.series} starts (earlier invocations: "
                         f"{', '.join(sorted(s for s in series if s))}): templates, locale, sampling or the sampler "
                         f"differ, so no earlier cell counts as held")
        return notes

    # ---- analysis ---------------------------------------------------------------------------------------------

    def analyze(self, traces: pa.Table, settings: Settings, *, reannotate: bool = False) -> Analysis:
        """Per model, this invocation's answers and self-reports (``numbers.model_summaries``), the rating means'
        intervals over probes (``intervals``); the experiment-wide matrix is ``mirrorscan matrix``."""
        from mirrorscan.instruments.open_scan.intervals import by_object, intervals_text, rating_intervals
        from mirrorscan.instruments.open_scan.numbers import latest_rows, model_summaries, summary_text, triples

        spec = OpenScanSpec.from_frozen(settings.instrument_settings)
        if reannotate:
            traces = self.annotate(traces, spec)
        rows = latest_rows(traces)
        summaries = model_summaries(rows)
        # an imported run's section holds only its series and where it came from
        numbers = {"series": spec.series, "locale": spec.locale,
                   "sampling": None if spec.sampling is None else dict(sorted(dataclasses.asdict(spec.sampling).items())),
                   "probes": None if spec.probe_set is None else spec.probe_set.n, "models": summaries,
                   "rating": "first integer of the reply inside the template's scale; null (not measured) otherwise"}
        numbers["intervals"] = rating_intervals(by_object(triples(rows)))   # not in --json: as the previous release
        text = summary_text(summaries, spec.series) + "\n" + intervals_text(numbers["intervals"])
        table = rows.select([c for c in ("label", "query_id", "query_hash", "envelope", "sample", "response", "rating",
                                         "error") if c in rows.column_names])
        return Analysis(text=text, numbers=numbers, tables={"rows": table}, detail=summaries,
                        json_view={k: v for k, v in numbers.items() if k != "intervals"})

    def same_answer(self, left: dict, right: dict) -> bool:
        """The same text (and, for a self-report, the same rating)."""
        return left.get("response") == right.get("response") and left.get("rating") == right.get("rating")

    def headline(self, analysis: Analysis) -> dict:
        """Per model: answers stored, mean answer length, mean cold and post-hoc ratings."""
        return {m["label"]: {k: m[k] for k in ("answers", "answer_chars_mean", "cold_mean", "posthoc_mean")}
                for m in analysis.numbers["models"]}

    headline_units = {"answer_chars_mean": 0, "cold_mean": 2, "posthoc_mean": 2}
    """Headline numbers as analyze prints them: characters whole, ratings with two decimals."""

    def matrix_coordinates(self) -> tuple[str, str]:
        """Models down, probes across."""
        return ("label", "query_id")

    def cli(self, argv: list[str], prog: str, reader: Reader) -> int:
        """``mirrorscan open_scan …``: the tools of ``tools``, its registry entry's line (``instruments.open_scan.cli``)."""
        from mirrorscan.instruments.open_scan.cli import main

        return main(argv, prog, reader)

    def describe_cell(self, row: dict) -> str:
        """``<query_id> <envelope> #<sample>: "<user text…>"``."""
        text = (row.get("user_text") or "").replace("\n", " ")
        return f'{row.get("query_id")} {row.get("envelope")} #{row.get("sample")}: "{text[:80]}"'


INSTRUMENT = OpenScan()
