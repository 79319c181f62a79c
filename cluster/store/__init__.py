"""The trace store: Parquet parts under ``<store>/<experiment>/<invocation_id>/`` on a local folder or S3
(``traces``, ``s3``), and a compact index of an invocation's rows (``row_index``).

Imports ``cluster.home``, ``grid`` and ``analysis``; no other part of ``cluster``."""
