"""What a model entry of a config points at (``resolve``): the packaged demo model (``demo``), tiny random models
(``tiny``), local folders and cached hub ids; model folders built once (``folders``) and weight identities
(``weights``).

Imports ``cluster.home``, ``cluster.store``, ``cluster.catalog``, ``grid`` and ``analysis``."""
