"""open_scan: one fixed probe set replayed verbatim to many models, with a cold and a post-hoc self-report."""
