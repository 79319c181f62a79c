"""Objects a config might name as an instrument by mistake, for the checks ``grid.instrument.resolve`` makes:
the class in place of an instance, and an instrument that leaves a required method to the bases."""

from __future__ import annotations

from echo_instrument import Echo

from mirrorscan.grid.instrument import Instrument

ECHO_CLASS = Echo
"""The class, not an instance of it."""


class Unrendered(Instrument):
    """Items and an analysis, but no ``render``: the engine would have no request to send."""

    name = "unrendered"
    engine_kind = "generate"
    load_spec = Echo.load_spec
    frozen = Echo.frozen
    from_frozen = Echo.from_frozen
    n_items = Echo.n_items
    cells = Echo.cells
    analyze = Echo.analyze


UNRENDERED = Unrendered()


class Minimal(Unrendered):
    """Only what an instrument must define; every other member comes from the parts' bases."""

    name = "minimal"
    render = Echo.render


MINIMAL = Minimal()
