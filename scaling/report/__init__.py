"""What records become: tables, CSV, figures, the HTML page, cost and comparison."""
