"""What works across instruments over the catalog and the store: reproduce, diff, report, browse."""
