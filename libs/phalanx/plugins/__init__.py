"""Built-in filter and score plugins; phalanx.plugins.registry registers them by name and builds the
framework from them (in_tree_framework, load_in_tree_framework)."""
