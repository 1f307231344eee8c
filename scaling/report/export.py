"""``scaling export DIR... --to FILE``: every record of several runs in one table.

Each row is one record of ``results.jsonl`` (sweep cells, max-batch trials, allreduce and
matrix measurements alike), with ``run`` (the run's name, as ``scaling report`` labels it) and
``run_dir`` (its folder) in front. A field whose values are all booleans, all integers, all
numbers or all strings keeps that type; nested values (options, versions, telemetry,
intervals) and fields of mixed types are JSON text. A field that a record lacks is null.

``.parquet`` (written with pyarrow) reads in pandas (``pd.read_parquet``), polars or DuckDB;
``.duckdb`` (written with duckdb) holds the table ``records``, replaced where it is already
there. Both libraries come with the ``export`` extra.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Dict, List, Tuple

from scaling.errors import ScalingError
from scaling.report import json_text
from scaling.report.runs import run_records

FORMATS = {".parquet": "pyarrow", ".duckdb": "duckdb"}
"""Each format, by the file's suffix, and the library that writes it."""
TABLE = "records"
"""The table a .duckdb file holds."""
SQL_TYPES = {"bool": "BOOLEAN", "int": "BIGINT", "float": "DOUBLE", "text": "VARCHAR",
             "json": "VARCHAR"}


def export_format(target) -> str:
    """The format of ``target`` by its suffix; a one-line error for an unknown one, or where
    its library is not installed."""
    suffix = Path(target).suffix.lower()
    if suffix not in FORMATS:
        raise ScalingError(f"--to {target}: unknown format {suffix or '(no suffix)'}; valid: "
                           f"{', '.join(FORMATS)}")
    if importlib.util.find_spec(FORMATS[suffix]) is None:
        raise ScalingError(f"writing {suffix} needs {FORMATS[suffix]}: "
                           f"pip install 'scaling[export]'")
    return suffix


def exported_rows(out_dirs) -> List[Dict]:
    """Every record of ``out_dirs``, with ``run`` and ``run_dir`` in front."""
    return [{"run": name, "run_dir": str(path.resolve()), **record}
            for name, path, records in run_records(out_dirs) for record in records]


def _kind(values: List) -> str:
    """bool, int, float, text or json: what every value of ``values`` but None is (from the
    set of their types, JSON's types having no subclasses)."""
    kinds = set(map(type, values))
    kinds.discard(type(None))
    if not kinds or kinds == {str}:
        return "text"
    if kinds == {bool}:
        return "bool"
    if kinds == {int}:
        return "int"
    if kinds <= {int, float}:
        return "float"
    return "json"


def columns(rows: List[Dict]) -> Dict[str, Tuple[str, List]]:
    """Each field, in the order rows first name it: its kind (bool, int, float, text or json)
    and its values, one per row, converted to that kind (None where a row lacks it). The
    values are read row by row and turned into columns at once (``zip``), never one field
    over every row at a time."""
    shapes = dict.fromkeys(map(tuple, rows))
    names = list(dict.fromkeys(name for shape in shapes for name in shape))
    found = {}
    for name, values in zip(names, zip(*(map(row.get, names) for row in rows))):
        values = list(values)
        kind = _kind(values)
        if kind == "float" and int in set(map(type, values)):
            values = [None if value is None else float(value) for value in values]
        elif kind == "json":
            values = [None if value is None else json_text(value) for value in values]
        found[name] = (kind, values)
    return found


def write_parquet(table: Dict[str, Tuple[str, List]], target: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(),
             "text": pa.string(), "json": pa.string()}
    pq.write_table(pa.table({name: pa.array(values, type=types[kind])
                             for name, (kind, values) in table.items()}), target)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def write_duckdb(table: Dict[str, Tuple[str, List]], target: Path) -> None:
    import duckdb

    with duckdb.connect(str(target)) as connection:
        connection.execute(f"CREATE OR REPLACE TABLE {TABLE} (" + ", ".join(
            f"{_quoted(name)} {SQL_TYPES[kind]}" for name, (kind, _) in table.items()) + ")")
        connection.executemany(
            f"INSERT INTO {TABLE} VALUES ({', '.join('?' * len(table))})",
            [list(row) for row in zip(*(values for _, values in table.values()))])


WRITERS = {".parquet": write_parquet, ".duckdb": write_duckdb}


def export(out_dirs, target) -> int:
    """Write every record of ``out_dirs`` to ``target`` (.parquet or .duckdb); the number of
    rows written."""
    suffix = export_format(target)
    rows = exported_rows(out_dirs)
    WRITERS[suffix](columns(rows), Path(target))
    return len(rows)
