"""What records become: tables, CSV, figures, the HTML page, cost and comparison."""

import contextlib
import gc
import json
import json.encoder


def _json_text():
    """``json.dumps(value, sort_keys=True)``, made once rather than per call: the report
    encodes a few values of every record (a large run's CSV and export, millions). The
    standard library's C encoder, called directly, takes less than half the time of
    ``JSONEncoder.encode``, which builds it anew for each value; where it is missing or does
    not write what ``json.dumps`` writes, the plain encoder."""
    encoder = json.JSONEncoder(sort_keys=True)
    try:
        chunks = json.encoder.c_make_encoder(
            None, encoder.default, json.encoder.encode_basestring_ascii, None,
            encoder.key_separator, encoder.item_separator, True, False, True)

        def text(value) -> str:
            return "".join(chunks(value, 0))

        sample = {"b": [1, 2.5, None, True, "é"], "a": {"d": {}, "c": []}, "e": float("nan")}
        if text(sample) == encoder.encode(sample) and text("x") == encoder.encode("x"):
            return text
    except (TypeError, AttributeError, ValueError):
        pass
    return encoder.encode


json_text = _json_text()


@contextlib.contextmanager
def many_records():
    """Read and work through a run's records without the cyclic garbage collector: records
    hold no cycles, so its passes over them only cost time (as much again as parsing a large
    ``results.jsonl``). Reference counting still frees what is dropped. When done, what is
    left is frozen (``gc.freeze``: later passes leave it out, as a full one over 100,000
    records would take a second) and the collector is back on."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
