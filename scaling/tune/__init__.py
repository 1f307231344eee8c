"""`scaling tune`: the search space, the race between configurations and what it found."""
