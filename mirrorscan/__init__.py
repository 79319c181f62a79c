"""mirrorscan: measure language models by asking the same question in many controlled forms, on Ray.

One installed package. Its parts live in folders at the top of the repository and are mapped into
this package by ``pyproject.toml`` (setuptools ``package-dir``), so ``import mirrorscan.grid`` reads
``grid/``:

- ``mirrorscan.grid``        the grid engine: specs, cells, probe ids, the instrument parts, the run of a scan
- ``mirrorscan.cluster``     storage and runtime: trace store, catalog, Ray session, journals, pipelines
- ``mirrorscan.actors``      engine actors: transformers, vLLM and HTTP samplers, scorers, activations
- ``mirrorscan.analysis``    statistics: G-study/D-study, Kendall's W, AUROC, permutation nulls, bootstraps
- ``mirrorscan.instruments`` forced_choice, open_scan, flinch, lens
- ``mirrorscan.results``     reading the store back: reports, reproduce/diff, the browser
- ``mirrorscan.jobs``        the command line: each verb parses, calls and prints

Importing ``mirrorscan`` imports none of them.
"""
