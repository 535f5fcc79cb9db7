#!/usr/bin/env python3
"""A `pelican consume --pipe` handler in Python (standard library only).

pelican starts it once and keeps it. Each entry arrives on stdin as one JSON line:
  {"stream": "orders", "id": "1700000000000-0", "fields": {...}, "deliveries": 1, "source": "new"}
and is answered on stdout with one JSON line, in any order:
  {"stream": "orders", "id": "1700000000000-0", "verdict": "ack"}   (or "retry", or "dead-letter")
("stream" is needed only when several streams are consumed; this example always echoes it).

Flush stdout after each answer (`sys.stdout.flush()`, or `print(..., flush=True)`): into a
pipe Python buffers what it writes, and an answer left in the buffer never reaches pelican,
which holds its entry until --overdue-ms tells so. Logs go to stderr, never to stdout.

    pelican consume --stream orders --group billing --consumer w1 --create-group \
        --pipe 'python3 examples/pipe/handler.py' --concurrency 64

What the example does is set by the environment (for trying it out, and for the tests):
  HANDLER_SLOW_MS    work this long on each entry (on a thread of its own: entries overlap)
  HANDLER_SHUFFLE    answer out of order: hold up to this many answers, then answer them
                     newest first (and every 50 ms what is held, so the last entries of a
                     stream do not wait for more to come)
  HANDLER_FAIL       a field name: entries with it get "retry"; HANDLER_POISON likewise
                     gets "dead-letter"
  HANDLER_SILENT     a field name: entries with it are never answered
  HANDLER_PID_FILE   write the process id here at start
  HANDLER_EMIT       a stream: each "ack" carries its output, committed with the ack in one
                     step — an entry {"input": <id>} added to it, and 1 added to <stream>:count
                     (an exactly-once stage); HANDLER_BAD_EMIT, a field name: entries with it
                     get a malformed output (a number for a field value), which fails them;
                     HANDLER_COUNT_BY, a field name: 1 is added too to that field's value in
                     the hash <stream>:by-<field> (a count per key, HINCRBY)
Real handlers do their work where `verdict()` is, and answer when it is done.
"""

import json
import os
import sys
import threading
import time

SLOW = float(os.environ.get("HANDLER_SLOW_MS", "0")) / 1000
SHUFFLE = int(os.environ.get("HANDLER_SHUFFLE", "0"))
FAIL = os.environ.get("HANDLER_FAIL")
POISON = os.environ.get("HANDLER_POISON")
SILENT = os.environ.get("HANDLER_SILENT")
EMIT = os.environ.get("HANDLER_EMIT")
BAD_EMIT = os.environ.get("HANDLER_BAD_EMIT")
COUNT_BY = os.environ.get("HANDLER_COUNT_BY")

# How often the answers held back by HANDLER_SHUFFLE are given, whatever comes.
HOLD = 0.05

out = threading.Lock()
held = []


def write_held():
    """Writes the answers held, newest first: out of order whenever more than one is."""
    while held:
        sys.stdout.write(json.dumps(held.pop()) + "\n")
    # Into a pipe stdout is block-buffered: without this the answers would wait there.
    sys.stdout.flush()


def write_held_often():
    """With HANDLER_SHUFFLE: gives what is held every HOLD seconds, entries coming or not."""
    while True:
        time.sleep(HOLD)
        with out:
            write_held()


def answer(entry, verdict):
    reply = {"stream": entry["stream"], "id": entry["id"], "verdict": verdict}
    if EMIT and verdict == "ack":
        fields = entry.get("fields") or {}
        value = 7 if BAD_EMIT and isinstance(fields, dict) and BAD_EMIT in fields else entry["id"]
        reply["emit"] = [{"stream": EMIT, "fields": {"input": value}}]
        reply["writes"] = [{"incrby": EMIT + ":count", "by": 1}]
        if COUNT_BY and isinstance(fields, dict) and COUNT_BY in fields:
            by = EMIT + ":by-" + COUNT_BY
            reply["writes"].append({"hincrby": by, "field": fields[COUNT_BY], "by": 1})
    with out:
        held.append(reply)
        if len(held) > SHUFFLE:
            write_held()


def verdict(entry):
    fields = entry.get("fields") or {}
    if not isinstance(fields, dict):
        return "ack"
    if POISON and POISON in fields:
        return "dead-letter"
    if FAIL and FAIL in fields:
        return "retry"
    return "ack"


def handle(entry):
    if SLOW:
        time.sleep(SLOW)
    answer(entry, verdict(entry))


def main():
    if os.environ.get("HANDLER_PID_FILE"):
        with open(os.environ["HANDLER_PID_FILE"], "w") as f:
            f.write(str(os.getpid()))
    if SHUFFLE:
        threading.Thread(target=write_held_often, daemon=True).start()
    for line in sys.stdin:
        entry = json.loads(line)
        fields = entry.get("fields") or {}
        if SILENT and isinstance(fields, dict) and SILENT in fields:
            continue
        if SLOW:
            threading.Thread(target=handle, args=(entry,), daemon=True).start()
        else:
            handle(entry)
    # stdin closed: pelican is stopping; every entry was answered (or is being).
    with out:
        write_held()


if __name__ == "__main__":
    main()
