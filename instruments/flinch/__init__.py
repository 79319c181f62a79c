"""flinch: how much a model suppresses the words that fluency demands — a term's log-probability where a
declarative carrier sentence makes it the obvious completion, on a fixed 0–100 scale, by axis.

``spec`` validates and freezes the config section, ``instrument`` is the grid engine's view (cells,
rendering, analysis), ``corpus`` loads and validates corpus files, ``scale`` maps log-probabilities to flinch and aggregates
axes, ``proxy`` is the sampling estimate for APIs without log-probabilities.
"""
