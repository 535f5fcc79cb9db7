#!/usr/bin/env python3
"""A `pelican consume --pipe` handler in Python (standard library only), on `pelican_pipe.py`.

pelican starts it once and keeps it. `handle(entry)` is called for each entry:
  {"stream": "orders", "id": "1700000000000-0", "fields": {...}, "deliveries": 1, "source": "new"}
and what it returns is the entry's verdict: "ack" (or nothing), "retry", "dead-letter", or an
ack carrying writes. pelican_pipe runs the loop the fast way: pelican sends the entries in
batches, one JSON line each, and gets one line of verdicts back (see pelican_pipe.py and the
--pipe section of cli/README.md). Logs go to stderr, never to stdout.

    pelican consume --stream orders --group billing --consumer w1 --create-group \
        --pipe 'python3 examples/pipe/handler.py'

What the example does is set by the environment (for trying it out, and for the tests):
  HANDLER_SLOW_MS    work this long on each entry (on a thread of its own: entries overlap,
                     each answered as it ends)
  HANDLER_SHUFFLE    answer out of order: hold up to this many answers, then answer them
                     newest first (and every 50 ms what is held, so the last entries of a
                     stream do not wait for more to come)
  HANDLER_FAIL       a field name: entries with it get "retry"; HANDLER_POISON likewise
                     gets "dead-letter"
  HANDLER_SILENT     a field name: entries with it are never answered
  HANDLER_PID_FILE   write the process id here at start
  HANDLER_LOG        a file: each entry's id is appended to it as the entry is handled
  HANDLER_EMIT       a stream: each "ack" carries its output, committed with the ack in one
                     step — an entry {"input": <id>} added to it, and 1 added to <stream>:count
                     (an exactly-once stage); HANDLER_BAD_EMIT, a field name: entries with it
                     get a malformed output (a number for a field value), which fails them;
                     HANDLER_COUNT_BY, a field name: 1 is added too to that field's value in
                     the hash <stream>:by-<field> (a count per key, HINCRBY)
Real handlers do their work where `verdict()` is, and return when it is done.
"""

import os
import threading
import time

import pelican_pipe

SLOW = float(os.environ.get("HANDLER_SLOW_MS", "0")) / 1000
SHUFFLE = int(os.environ.get("HANDLER_SHUFFLE", "0"))
FAIL = os.environ.get("HANDLER_FAIL")
POISON = os.environ.get("HANDLER_POISON")
SILENT = os.environ.get("HANDLER_SILENT")
EMIT = os.environ.get("HANDLER_EMIT")
BAD_EMIT = os.environ.get("HANDLER_BAD_EMIT")
COUNT_BY = os.environ.get("HANDLER_COUNT_BY")
LOG = os.environ.get("HANDLER_LOG")
# Written at once, a line per entry: what was handled is known even if this process is killed.
log = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT) if LOG else None

# How often the answers held back by HANDLER_SHUFFLE are given, whatever comes.
HOLD = 0.05


def verdict(entry):
    """The work, and its outcome."""
    if log is not None:
        os.write(log, (entry["id"] + "\n").encode())
    fields = entry.get("fields") or {}
    if not isinstance(fields, dict):
        return "ack"
    if POISON and POISON in fields:
        return "dead-letter"
    if FAIL and FAIL in fields:
        return "retry"
    return "ack"


def outcome(entry):
    """The verdict, with the writes HANDLER_EMIT asks for on an ack."""
    said = verdict(entry)
    if not EMIT or said != "ack":
        return said
    fields = entry.get("fields") or {}
    value = 7 if BAD_EMIT and isinstance(fields, dict) and BAD_EMIT in fields else entry["id"]
    writes = [{"incrby": EMIT + ":count", "by": 1}]
    if COUNT_BY and isinstance(fields, dict) and COUNT_BY in fields:
        writes.append({"hincrby": EMIT + ":by-" + COUNT_BY, "field": fields[COUNT_BY], "by": 1})
    return {"verdict": "ack", "emit": [{"stream": EMIT, "fields": {"input": value}}], "writes": writes}


held = []
holding = threading.Lock()


def give_held():
    """Answers what HANDLER_SHUFFLE holds, newest first: out of order whenever more than one is."""
    with holding:
        while held:
            pelican_pipe.answer(*held.pop())


def give_held_often():
    while True:
        time.sleep(HOLD)
        give_held()


def slowly(entry):
    time.sleep(SLOW)
    pelican_pipe.answer(entry, outcome(entry))


def handle(entry):
    fields = entry.get("fields") or {}
    if SILENT and isinstance(fields, dict) and SILENT in fields:
        return pelican_pipe.LATER  # and never answered
    if SLOW:
        threading.Thread(target=slowly, args=(entry,), daemon=True).start()
        return pelican_pipe.LATER
    if SHUFFLE:
        with holding:
            held.append((entry, outcome(entry)))
            full = len(held) > SHUFFLE
        if full:
            give_held()
        return pelican_pipe.LATER
    return outcome(entry)


def main():
    if os.environ.get("HANDLER_PID_FILE"):
        with open(os.environ["HANDLER_PID_FILE"], "w") as f:
            f.write(str(os.getpid()))
    if SHUFFLE:
        threading.Thread(target=give_held_often, daemon=True).start()
    pelican_pipe.run(handle)
    # stdin closed: pelican is stopping; every entry was answered (or is being).
    give_held()


if __name__ == "__main__":
    main()
