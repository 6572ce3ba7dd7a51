"""Built-in filter and score plugins; phalanx.plugins.registry registers them by name and builds the
framework from them (in_tree_framework)."""

from __future__ import annotations

from phalanx.plugins.registry import in_tree_registries

# The former name, until services/scheduler/__main__.py builds its framework with load_in_tree_framework.
default_registries = in_tree_registries

__all__ = ["default_registries", "in_tree_registries"]
