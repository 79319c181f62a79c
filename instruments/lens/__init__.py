"""lens: contrastive activation probes — a direction per (evaluation, deployment) framing pair and layer, the
AUROC of a labelled scoring set projected onto it, and how much of that number belongs to the prompt.

``items`` loads framings, task texts and scoring sets; ``instrument`` is the engine's view (config section,
cells, rendering); ``directions`` turns stored vectors into per-wrapper AUROC curves; ``numbers`` holds the
statistics over wrappers (G-study, concordance, nulls, surface baseline); ``norms`` the one number a cell
shows in the browser.
"""
