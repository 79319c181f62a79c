"""The forced-choice instrument (an ``Instrument``): what the grid engine calls to run word-pair preference probes.

A cell is (model, word pair, envelope, ordering, sample): the envelope's user template is filled with the
two words (AB: word_a into ``{a}``; BA: swapped), a ``generate`` engine answers, and the classifier reads
the answer as A, B, UNCLEAR or REF inside the engine actor, before the row is stored. The numbers
(per-cell commit rate, pair-commit, sharpness, position bias, fingerprints) are defined in README.md
beside this file.
"""

from __future__ import annotations

import pyarrow as pa

from mirrorscan.grid.instrument import Analysis, Instrument, SpecContext
from mirrorscan.grid.settings import Settings
from mirrorscan.grid.trace_schema import doc_field
from mirrorscan.instruments.forced_choice import report as fc_report
from mirrorscan.instruments.forced_choice.cells import expand_forced_choice, render_forced_choice
from mirrorscan.instruments.forced_choice.classify import with_classes
from mirrorscan.instruments.forced_choice.spec import ForcedChoiceSpec, load_section

COLUMNS = (
    doc_field("pair_id", pa.string(), "pair id from the probe set"),
    doc_field("word_a", pa.string(), "first word of the pair as listed in the probe set"),
    doc_field("word_b", pa.string(), "second word of the pair as listed in the probe set"),
    doc_field("class", pa.string(), "A, B, UNCLEAR or REF (written by the classifier in the engine actor; "
                                    "null for an error row)"),
    doc_field("classifier_version", pa.string(), "version of the classifier that wrote class"),
)


class ForcedChoice(Instrument[ForcedChoiceSpec]):
    """Word-pair preference probes in many envelopes and both orderings (see the module docstring)."""

    name = "forced_choice"
    engine_kind = "generate"
    columns = COLUMNS
    coordinates = ("pair_id", "word_a", "word_b")
    legacy_keys = ("probe_set", "envelopes_file", "envelopes", "orderings")
    sources = "mirrorscan.instruments.forced_choice.sources"
    """Its headline numbers' definitions and queries, and the scan summary's query (``sources``)."""
    cell_value = ("class", "class")
    """A cell's answer, for the browser: its class (A, B, UNCLEAR, REF), counted per value."""

    def load_spec(self, section: dict, ctx: SpecContext) -> ForcedChoiceSpec:
        """Validate the ``forced_choice`` section (see ``instruments.forced_choice.spec``)."""
        return load_section(section, ctx)

    def envelope_version(self, spec: ForcedChoiceSpec) -> str | None:
        """Version string of the envelopes file (stored on every row as ``envelope_version``); None where the
        section does not record it."""
        return spec.envelope_file.version

    def content_hashes(self, spec: ForcedChoiceSpec) -> dict:
        """SHA-256 of the pair CSV and of the envelopes file (catalog ``content_hashes``)."""
        return {"probe_set": spec.probe_set_sha256, "envelopes": spec.envelope_file.sha256}

    def n_items(self, spec: ForcedChoiceSpec) -> int:
        """Cells per model and sample: pairs × envelopes × orderings (the pairs counted in the pair CSV, checked
        against its frozen hash, where the section does not record their number)."""
        n_pairs = spec.n_pairs if spec.n_pairs is not None else len(spec.pairs())
        return n_pairs * len(spec.envelope_ids) * len(spec.orderings)

    def cells(self, spec: ForcedChoiceSpec, labels: list[str], samples: int) -> pa.Table:
        """label × pair × envelope × ordering × sample, its text columns dictionary-encoded (a large grid holds
        each text once); the pair set is read again and its hash checked."""
        return expand_forced_choice(labels, spec.pairs().table, list(spec.envelope_ids), list(spec.orderings),
                                    samples, compact=True)

    def render(self, block: pa.Table, spec: ForcedChoiceSpec) -> pa.Table:
        """system_text and user_text of each cell (literal substitution of the words into the envelope)."""
        return render_forced_choice(block, spec.envelopes)

    def annotate(self, rows: pa.Table, spec: ForcedChoiceSpec) -> pa.Table:
        """Each answer's class (A/B/UNCLEAR/REF) and the classifier version, before the rows are stored."""
        return with_classes(rows, spec.envelopes)

    def analyze(self, traces: pa.Table, settings: Settings, *, reannotate: bool = False) -> Analysis:
        """Per model: per-cell commit rate, pair-commit under both rules, sharpness, position bias,
        fingerprint and 3-cycles (``reannotate``: classify the stored text again)."""
        invocation_id = traces.column("invocation_id")[0].as_py()
        rep = fc_report.report(traces, settings, invocation_id, settings.experiment, reclassify=reannotate)
        return fc_report.analysis(rep)

    compares = True
    """Two fingerprints side by side (``compare``)."""

    def compare(self, left: tuple[pa.Table, Settings], right: tuple[pa.Table, Settings], *, label_a: str | None = None,
                label_b: str | None = None, rule: str | None = None) -> Analysis:
        """Two fingerprints (model labels of two invocations, or of one): Hamming distance, agreement and
        violent disagreement under ``rule`` (default unanimity)."""
        from mirrorscan.instruments.forced_choice.compare import compare_invocations

        return compare_invocations(left, right, label_a=label_a, label_b=label_b, rule=rule or "unanimity")

    def same_answer(self, left: dict, right: dict) -> bool:
        """Same response text and same class."""
        return left.get("response") == right.get("response") and left.get("class") == right.get("class")

    def headline(self, analysis: Analysis) -> dict:
        """Per model: per-cell commit rate, pair-commit (unanimity) split, mean sharpness, position bias (pp)."""
        out = {}
        for m in analysis.numbers["models"]:
            out[m["label"]] = {"per_cell_commit_rate": m["commit_rate"]["per_cell_commit_rate"],
                               "pair_commit_unanimity": m["pair_commit_unanimity"]["split"],
                               "mean_sharpness": m["sharpness"]["mean_sharpness"],
                               "position_bias_pp": m["position_bias"]["overall"]["position_bias_pp"]}
        return out

    def matrix_coordinates(self) -> tuple[str, str]:
        """Models down, pairs across."""
        return ("label", "item_key")

    def describe_cell(self, row: dict) -> str:
        """``word_a vs word_b in <envelope> (<ordering>)``."""
        return f"{row.get('word_a')} vs {row.get('word_b')} in {row.get('envelope')} ({row.get('ordering')})"


INSTRUMENT = ForcedChoice()
"""The registry's entry point."""
