"""mirrorscan: measure language models by asking the same question in many controlled forms, on Ray.

One installed package. Its parts live in folders at the top of the repository and are mapped into
this package by ``pyproject.toml`` (setuptools ``package-dir``), so ``import mirrorscan.grid`` reads
``grid/``:

- ``mirrorscan.grid``        specs and settings records, cells, probe ids, the instrument parts and registry
- ``mirrorscan.analysis``    statistics: G-study/D-study, Kendall's W, AUROC, permutation nulls, bootstraps
- ``mirrorscan.actors``      engines: transformers, vLLM and HTTP samplers, scorers, activations
- ``mirrorscan.instruments`` forced_choice, open_scan, flinch, lens
- ``mirrorscan.cluster``     storage, runtime and the grid engine: trace store, catalog, Ray session, the run of
                             a scan, sweeps, pipelines, journals
- ``mirrorscan.results``     reading the store back: reports, reproduce/diff, the browser
- ``mirrorscan.jobs``        the command line: each verb parses, calls and prints

in layer order: none imports a part listed after it (``docs/architecture.md`` says which it may import).

Importing ``mirrorscan`` imports none of them.
"""
