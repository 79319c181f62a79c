"""lens: contrastive activation probes — a direction per (evaluation, deployment) framing pair and layer, the
AUROC of a labelled scoring set projected onto it, and how much of that number belongs to the prompt.

``spec`` validates and freezes the config section (``LensSpec``, its typed fields ``LensConfig``); ``items``
loads framings, task texts and scoring sets; ``instrument`` is the grid engine's view (cells, rendering);
``directions`` turns stored vectors into per-wrapper AUROC curves; ``numbers`` holds the statistics over wrappers
(G-study, concordance, nulls); ``baseline`` the surface-form baseline (grouped, out of fold) and the note naming
plumbing models; ``norms`` the one number a cell shows in the browser. How a text becomes token ids (system
turn, suffix, prefix, frozen date) is the engine's: ``actors.activation_prompt``.
"""
