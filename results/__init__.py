"""What works across instruments over the catalog and the store: one invocation read back
(``invocations``) and its self-contained HTML report (``report``, ``report_html``)."""
