"""Where grids run and what they leave: the store, the catalog, the models, the Ray runtime and the run of a scan.

Subpackages, lowest first; each imports only those before it (and ``cluster.home``, where local state lives),
plus ``grid``, ``analysis`` and ``actors`` (tests/test_layers.py holds the order):

- ``store``: the trace store (Parquet parts on a local folder or S3) and its row index;
- ``catalog``: the PostgreSQL catalog (invocations, driver runs and their lease, the inference log, migrations,
  the embedded local server);
- ``models``: what a model entry points at (packaged, tiny random, local, cached hub ids), built model folders and
  weight identities;
- ``runtime``: the Ray session, job submission and what a job ships, the inference-log tap, the statistics'
  Ray drivers, provenance;
- ``scan``: one run of a scan, from preflight and plan through stages, sweep and pipeline to its outcome.
"""
