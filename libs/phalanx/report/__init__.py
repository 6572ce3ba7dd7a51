"""Renderers of simulation reports: the HTML page (Jinja2 templates, plots drawn by matplotlib as SVG), the
PNG, the text summary and side-by-side comparison, and the files they are written to.

They read the report as a dict (the JSON of `phalanx simulate --output`) and import nothing of the
simulator. Nothing that runs in production imports them (an import contract in pyproject.toml); the
modules that draw need the `report` extra and import it only when asked to draw.
"""
