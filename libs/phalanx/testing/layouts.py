"""Phalanx's process layouts, for the stacks that start it (tests, simulations, benchmarks, chaos trials):
`services`, the queue, binder and scheduler each in its own process (the chart's default), or `combined`,
the three in one phalanx-combined process. Imports nothing, so the command line's parsers can offer them."""

SEPARATE = "services"
COMBINED = "combined"  # also the name of that layout's one process
LAYOUTS = (SEPARATE, COMBINED)
