"""One run of a scan (``run.ScanRun``): its options and result (``records``), the checks before anything is
recorded (``preflight``, ``resources``), its inputs (``inputs``), its plan (``plan``), the stages' grids
(``stages``), the sweep of model pools (``sweep``, ``endpoints``), the Ray Data pipeline per model
(``pipeline``), the in-flight journal (``journal``), progress (``progress``), the engine log (``log``) and
the outcome (``outcome``).

The top of ``cluster``: imports every other subpackage of it, ``grid``, ``analysis`` and ``actors``."""
