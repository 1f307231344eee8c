"""The largest batch that fits: the search and where its next trial goes."""
