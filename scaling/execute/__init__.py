"""Running cells: one cell's process tree, its watch, its record and the store of records."""
