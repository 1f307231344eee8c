"""``results.csv``, byte for byte as the csv module's writer (the excel dialect) writes it,
in less time.

A report of 100,000 records writes 100,000 rows of some 130 columns; the csv module's writer
looks at every character of every field, and took a third of such a report. Here each row is
one ``str.join`` of its values, and only the fields that can hold a comma, a quote or a line
break (its texts, lists and objects) are looked at for quotes, with the positions of each kind
worked out once per combination of types that the rows' values have.
"""

from __future__ import annotations

import itertools
import re
from typing import Dict, Iterator, List, Tuple

from scaling.report import json_text
from scaling.report.columns import CSV_COLUMNS

SPECIAL = re.compile(r'[,"\r\n]')
"""What makes the csv module quote a field (``QUOTE_MINIMAL``): the delimiter, the quote and
the line terminator's characters."""
PLAIN = (int, float, bool)
"""Types whose text never holds a special character (the csv module writes their ``str``)."""


def csv_field(text: str) -> str:
    """A text as the csv module writes it: in quotes, each of its own doubled, where it holds
    a comma, a quote or a line break; as it is otherwise."""
    return '"' + text.replace('"', '""') + '"' if SPECIAL.search(text) else text


def _plan(types: Tuple) -> Tuple[List[int], List[int], List[int]]:
    """Where a row of values of ``types`` has None (written empty), lists and objects (JSON
    text) and anything else that may need quotes."""
    empty, containers, texts = [], [], []
    for index, kind in enumerate(types):
        if kind is type(None):
            empty.append(index)
        elif issubclass(kind, (dict, list)):
            containers.append(index)
        elif kind not in PLAIN:
            texts.append(index)
    return empty, containers, texts


def csv_lines(rows: List[Dict], columns: List[str]) -> Iterator[str]:
    """Each row's values of ``columns`` (two or more) as a line of CSV, byte for byte what the
    csv module's writer (the excel dialect) writes, without its line terminator: lists and
    objects as JSON text, None empty."""
    plans: Dict[Tuple, Tuple] = {}
    for row in rows:
        values = list(map(row.get, columns))
        types = tuple(map(type, values))
        plan = plans.get(types)
        if plan is None:
            plan = plans[types] = _plan(types)
        empty, containers, texts = plan
        for index in empty:
            values[index] = ""
        for index in containers:
            value = values[index]
            values[index] = csv_field(json_text(value)) if value else \
                ("{}" if isinstance(value, dict) else "[]")
        for index in texts:
            values[index] = csv_field(str(values[index]))
        yield ",".join(map(str, values))


def write_csv(rows: List[Dict], path, chunk: int = 10_000) -> None:
    """``rows`` as ``results.csv``: the columns of ``CSV_COLUMNS``, in order, lists and
    objects as JSON text and None empty, as the csv module writes them (:func:`csv_lines`);
    a record's other fields never reach the file."""
    with open(path, "w", newline="") as out:
        out.write(",".join(map(csv_field, CSV_COLUMNS)) + "\r\n")
        lines = csv_lines(rows, CSV_COLUMNS)
        while True:
            block = list(itertools.islice(lines, chunk))
            if not block:
                break
            out.write("\r\n".join(block) + "\r\n")
