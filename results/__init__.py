"""What works across instruments over the catalog and the store (browse, and the tools beside it)."""
