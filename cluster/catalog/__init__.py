"""The PostgreSQL catalog: frozen invocation rows and the migrations that make them (``client``), driver runs and
their lease (``runs``), the inference log's writer, rows and view (``inference_writer``, ``inference_rows``,
``inference_view``), and the embedded local server (``embedded_pg``).

Imports ``cluster.home``, ``cluster.store``, ``grid`` and ``analysis``."""
