"""The read-answer loop of a `pelican consume --pipe` handler, so that a handler is one function.

    import pelican_pipe

    def handle(entry):
        # entry: {"stream": "orders", "id": "1700000000000-0", "fields": {...},
        #         "deliveries": 1, "source": "new"}
        ...  # the work
        # Return nothing (or "ack") to acknowledge it; "retry", or raise, to leave it pending
        # (it comes back); "dead-letter", or raise pelican_pipe.DeadLetter, to set it aside
        # (with --dead-letter); or a dict: {"verdict": "ack", "emit": [...], "writes": [...]}.

    pelican_pipe.run(handle)

Or a batch at a time, `pelican_pipe.run_batch(handle_batch)`: `handle_batch(entries)` returns a
verdict per entry, in order (or None: all acknowledged; raising fails them all). Or an
`async def handle(entry)`: each entry a task, answered as it ends (for work that waits on I/O).

Why use it: pelican offers batches (PELICAN_PIPE_PROTOCOL=batch in the environment), and this
loop takes them. A batch comes as one line, {"batch": 7, "entries": [...]}, and is answered by
one line, {"batch": 7, "verdicts": ["ack", ...]}: one parse and one write for all its entries
rather than one each, which is most of what a handler in Python spends per entry. Each answer
is flushed as it is written (into a pipe, Python's stdout holds what it writes until flushed:
an answer left there never reaches pelican). Logs go to stderr, never to stdout.

An entry answered later, by another thread (a pool, a queue), is returned as `LATER` and
answered with `answer(entry, verdict)` when it is done; `answer` is thread-safe. Run under a
pelican that does not offer batches, the same loop answers one line per entry.

Standard library only; Python 3.8+. Copy this file beside your handler.
"""

import asyncio
import inspect
import json
import os
import sys
import threading
import traceback

__all__ = ["run", "run_batch", "answer", "DeadLetter", "LATER"]

# The handler's first line when pelican offers batches: it takes them.
HELLO = '{"protocol":"batch"}\n'


class DeadLetter(Exception):
    """Raised by a handler: this entry can never be processed; it goes to --dead-letter."""


# Returned by a handler for an entry it answers later itself, with `answer(entry, verdict)`.
LATER = object()

_lock = threading.Lock()


def _write(text):
    with _lock:
        sys.stdout.write(text)
        sys.stdout.flush()


def _member(verdict):
    """A verdict as it goes in a batch's answer (None: answered later, on its own line)."""
    if verdict is None:
        return "ack"
    if verdict is LATER:
        return None
    if isinstance(verdict, dict):
        return verdict if "verdict" in verdict else dict(verdict, verdict="ack")
    return verdict


def _reply(entry, verdict):
    """An entry's answer on a line of its own."""
    member = _member(verdict)
    reply = dict(member) if isinstance(member, dict) else {"verdict": member}
    reply["stream"] = entry["stream"]
    reply["id"] = entry["id"]
    return reply


def answer(entry, verdict="ack"):
    """Answers `entry` on a line of its own, at once: for an entry a handler returned LATER
    for. Thread-safe."""
    _write(json.dumps(_reply(entry, verdict)) + "\n")


def _failed(entry, error):
    """What an exception in the handler makes of an entry: told on stderr."""
    if isinstance(error, DeadLetter):
        print(f"pelican_pipe: {entry.get('id')}: dead-letter: {error}", file=sys.stderr, flush=True)
        return "dead-letter"
    print(f"pelican_pipe: {entry.get('id')}: failed, it stays pending:", file=sys.stderr)
    traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
    sys.stderr.flush()
    return "retry"


def _one(handle, entry):
    try:
        return handle(entry)
    except Exception as error:  # the entry's failure, not the loop's
        return _failed(entry, error)


def _lines():
    """The lines pelican writes (bytes: json.loads reads them without a decode of its own),
    after saying that batches are welcome if pelican offers them."""
    if "batch" in os.environ.get("PELICAN_PIPE_PROTOCOL", "").split(","):
        _write(HELLO)
    for line in sys.stdin.buffer:
        if line.strip():
            yield json.loads(line)


def _serve(verdicts_of):
    """The loop: each batch's verdicts (`verdicts_of(entries)`, in order) as one line, each
    single entry's as one line; until pelican closes stdin (it is stopping, and has waited
    for every answer)."""
    for message in _lines():
        if "entries" in message and "batch" in message:
            members = [_member(v) for v in verdicts_of(message["entries"])]
            if any(m is not None for m in members):
                _write(json.dumps({"batch": message["batch"], "verdicts": members}) + "\n")
        else:
            [verdict] = verdicts_of([message])
            if verdict is not LATER:
                _write(json.dumps(_reply(message, verdict)) + "\n")


def run(handle):
    """Calls `handle(entry)` for each entry and answers with what it returns (see the
    module's docs); an `async def handle` runs each entry as a task. Returns when pelican
    closes stdin."""
    if inspect.iscoroutinefunction(handle):
        asyncio.run(_serve_async(handle))
        return
    _serve(lambda entries: [_one(handle, entry) for entry in entries])


def run_batch(handle_batch):
    """Calls `handle_batch(entries)` for each batch (a list of one entry when pelican sends
    entries one by one): it returns a verdict per entry, in order, or None (all acked); an
    exception fails them all. Returns when pelican closes stdin."""

    def verdicts_of(entries):
        try:
            verdicts = handle_batch(entries)
        except Exception as error:
            return [_failed(entry, error) for entry in entries]
        if verdicts is None:
            return ["ack"] * len(entries)
        verdicts = list(verdicts)
        if len(verdicts) != len(entries):
            why = f"{len(verdicts)} verdicts for {len(entries)} entries"
            return [_failed(entry, ValueError(why)) for entry in entries]
        return verdicts

    _serve(verdicts_of)


async def _serve_async(handle):
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 30)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    if "batch" in os.environ.get("PELICAN_PIPE_PROTOCOL", "").split(","):
        _write(HELLO)
    tasks = set()

    async def one(entry):
        try:
            verdict = await handle(entry)
        except Exception as error:
            verdict = _failed(entry, error)
        if verdict is not LATER:
            answer(entry, verdict)

    while True:
        line = await reader.readline()
        if not line:
            break
        if not line.strip():
            continue
        message = json.loads(line)
        batch = "entries" in message and "batch" in message
        for entry in message["entries"] if batch else [message]:
            task = asyncio.ensure_future(one(entry))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)
