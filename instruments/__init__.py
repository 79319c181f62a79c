"""The instruments, one folder each; the grid engine finds them through ``grid.instrument.REGISTRY``."""
